"""Use the client openapi-python-client generated from docs/openapi.json,
as generated, against the running service.

argv: the directory of the generated package, the service's base URL, the
API token. Exit 0 when every call answers as the document says.
"""
import sys

sys.path.insert(0, sys.argv[1])
from slidegate_client import AuthenticatedClient  # noqa: E402
from slidegate_client.api.default import check, limited, reset  # noqa: E402
from slidegate_client.models import (  # noqa: E402
    CallRequest,
    Decision,
    Limited,
    Reset,
    ResetRequest,
)

client = AuthenticatedClient(base_url=sys.argv[2], token=sys.argv[3])
body = CallRequest(key="generated-client", policy="api")
first = check.sync_detailed(client=client, body=body)
assert first.status_code == 200 and isinstance(first.parsed, Decision), first
assert first.parsed.allowed and first.parsed.source.value == "store", first.parsed
second = check.sync_detailed(client=client, body=body)
assert second.status_code == 429 and isinstance(second.parsed, Decision), second
assert not second.parsed.allowed and second.parsed.retry_after_ms > 0, second.parsed
top = limited.sync(client=client, top=5)
assert isinstance(top, Limited), top
assert any(entry.key == "generated-client" and entry.refused == 1 for entry in top.keys), top
done = reset.sync(client=client, body=ResetRequest(key="generated-client", policy="api"))
assert isinstance(done, Reset) and done.reset and done.counters_removed == 1, done
assert check.sync(client=client, body=body).allowed
print("the generated client works: check 200 and 429, limited, reset")
