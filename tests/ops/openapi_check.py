"""Validate docs/openapi.json with a real OpenAPI validator, then validate
live answers of the running service against the schemas it declares.

argv: the document, a JSON file of answers [{method, path, status,
content_type, body}]. Exit 0 when all hold; every failure is printed.
"""
import json
import sys

from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

document_path, answers_path = sys.argv[1], sys.argv[2]
with open(document_path) as file:
    document = json.load(file)
validate(document)
print("openapi-spec-validator: the document is valid OpenAPI", document["openapi"])

with open(answers_path) as file:
    answers = json.load(file)
failures = []


def request_schema(operation):
    schema = dict(operation["requestBody"]["content"]["application/json"]["schema"])
    schema["components"] = document["components"]
    return schema


for answer in answers:
    where = f'{answer["method"]} {answer["path"]} -> {answer["status"]}'
    template = answer.get("template", answer["path"].split("?")[0])
    operations = document["paths"].get(template, {})
    operation = operations.get(answer["method"].lower())
    if operation is None and answer["status"] == 405 and operations:
        # A method the path does not take: every operation of the path
        # declares the 405 it answers then.
        undeclared = [method for method, other in operations.items() if "405" not in other["responses"]]
        if undeclared:
            failures.append(f"{where}: 405 not declared by {undeclared}")
        else:
            print(f"{where}: valid (405 declared)")
        continue
    if operation is None:
        failures.append(f"{where}: no such operation in the document")
        continue
    if "request" in answer:
        # The document and the server judge the body alike: refused by
        # one (a 400 from the server) means refused by the other.
        errors = [e.message for e in Draft202012Validator(request_schema(operation)).iter_errors(answer["request"])]
        if bool(errors) != (answer["status"] == 400):
            failures.append(
                f"{where}: request {json.dumps(answer['request'])[:100]}: the document "
                f"{'refuses it: ' + '; '.join(errors) if errors else 'accepts it'}, the server answered {answer['status']} {answer['body'][:100]}"
            )
    declared = operation["responses"].get(str(answer["status"])) or operation["responses"].get("default")
    if declared is None:
        failures.append(f"{where}: status not declared")
        continue
    content = declared.get("content")
    if not answer["body"]:
        if content:
            failures.append(f"{where}: empty body, but the document declares {list(content)}")
        else:
            print(f"{where}: valid (no body, as declared)")
        continue
    if not content or answer["content_type"] not in content:
        failures.append(f'{where}: content type {answer["content_type"]!r} not declared')
        continue
    schema = dict(content[answer["content_type"]]["schema"])
    schema["components"] = document["components"]
    errors = list(Draft202012Validator(schema).iter_errors(json.loads(answer["body"])))
    for error in errors:
        failures.append(f"{where}: {error.message} at {list(error.absolute_path)}")
    if not errors:
        print(f"{where}: valid")
for failure in failures:
    print("FAIL", failure)
sys.exit(1 if failures else 0)
