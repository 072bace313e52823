"""Validate custom resources against their CRD's OpenAPI v3 schema.

usage: validate_crd.py SCHEMA.json RESOURCES.json

SCHEMA.json is a CRD version's `openAPIV3Schema` (as JSON Schema);
RESOURCES.json a JSON list of resources. Every object the schema describes
refuses properties it does not name (`additionalProperties: false`), as
`kubernetes-validate --strict` does for the built-in kinds: a misspelt
field is an error here, where the API server would silently prune it.
Prints one line a resource (PASSED or ERROR with the field) and exits 1 if
any failed. Run by tests/kubernetes.rs.
"""

import json
import sys

import jsonschema


def main():
    with open(sys.argv[1]) as f:
        schema = json.load(f)
    with open(sys.argv[2]) as f:
        resources = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    failed = 0
    for resource in resources:
        name = "%s/%s" % (resource.get("kind"), resource.get("metadata", {}).get("name"))
        errors = sorted(validator.iter_errors(resource), key=lambda e: list(e.absolute_path))
        for error in errors:
            path = ".".join(str(p) for p in error.absolute_path) or "(root)"
            print("ERROR %s: %s: %s" % (name, path, error.message))
        if errors:
            failed += 1
        else:
            print("PASSED %s" % name)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
