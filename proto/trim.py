#!/usr/bin/env python3
"""Trim the vendored Envoy protos to what RLS v3 and RLQS v3 need (see README.md).

Run from this folder after copying the upstream files over the vendored ones:
it drops the udpa/validate annotations, the messages the service does not use,
and cuts base.proto down to HeaderValue. Field numbers and names are untouched,
so the wire format is upstream's.
"""
import re
from pathlib import Path

ANNOTATION_IMPORT = re.compile(r'^import "(udpa|validate|xds)/.*";\n', re.M)
FILE_OPTION = re.compile(r'^option \((udpa\.annotations|xds\.annotations\.v3)\.file_status\).*\n', re.M)
ONEOF_REQUIRED = re.compile(r'^\s*option \(validate\.required\) = true;\n', re.M)
MESSAGE_OPTION = re.compile(r'^\s*option \(udpa\.annotations\.[a-z_]+\)\.[a-z_]+ =\s*\n?\s*"[^"]*";\n', re.M)
FIELD_RULES = re.compile(r'\s*\[\s*\((validate\.rules|udpa\.annotations)[^;]*?\]\s*;', re.S)


def strip(text: str) -> str:
    text = ANNOTATION_IMPORT.sub("", text)
    text = FILE_OPTION.sub("", text)
    text = MESSAGE_OPTION.sub("", text)
    text = ONEOF_REQUIRED.sub("", text)
    return FIELD_RULES.sub(";", text)


def cut_messages(text: str, names: list[str]) -> str:
    for name in names:
        start = text.index(f"message {name} {{")
        # Back up over the comment block that documents the message.
        lines = text[:start].split("\n")
        while lines and lines[-2].startswith("//"):
            lines.pop(-2)
        start = len("\n".join(lines))
        depth, end = 0, text.index("{", start)
        for end in range(end, len(text)):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0:
                break
        text = text[:start] + text[end + 2:]
    return text


rls = Path("envoy/service/ratelimit/v3/rls.proto")
rls.write_text(strip(rls.read_text()))

common = Path("envoy/extensions/common/ratelimit/v3/ratelimit.proto")
text = strip(common.read_text())
text = text.replace('import "envoy/type/v3/token_bucket.proto";\n', "")
common.write_text(cut_messages(text, ["LocalRateLimitDescriptor", "LocalClusterRateLimit"]))

# RLQS: annotations only.
for path in [
    "envoy/service/rate_limit_quota/v3/rlqs.proto",
    "envoy/type/v3/ratelimit_strategy.proto",
    "envoy/type/v3/token_bucket.proto",
]:
    Path(path).write_text(strip(Path(path).read_text()))

unit = Path("envoy/type/v3/ratelimit_unit.proto")
unit.write_text(strip(unit.read_text()))

base = Path("envoy/config/core/v3/base.proto")
text = base.read_text()
header, body = text.split("// [#protodoc-title", 1)
start = body.index("// Header name/value pair.\nmessage HeaderValue {")
end = body.index("\n}\n", start) + 3
header = re.sub(r'^import .*\n', "", header, flags=re.M)
base.write_text(strip(header + "// [#protodoc-title" + body.split("\n", 1)[0] + "\n\n" + body[start:end]))
