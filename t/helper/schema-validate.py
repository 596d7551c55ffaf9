#!/usr/bin/env python3
"""schema-validate.py SCHEMA.json < DOCS - check documents against a JSON schema with the
jsonschema package (the reference for t2200-json-schema.bats).

DOCS are JSON texts each followed by a NUL byte (what `capy-test-tool schema-walk` writes).
Each must parse as strict JSON (no NaN or Infinity, no duplicate keys) and validate, formats
included: jsonschema's own format checker, plus date-time and time, which it checks only with
a package this machine may lack (rfc3339-validator), checked here with datetime. Prints
"N documents valid" and exits 0, or prints the first failure and exits 1.
"""
import datetime
import json
import re
import sys

import jsonschema

RFC3339_TIME = r'\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)'


def full_time(s):
    if not re.fullmatch(RFC3339_TIME, s):
        return False
    datetime.time.fromisoformat(s.replace('Z', '+00:00'))
    return True


def date_time(s):
    if not re.fullmatch(r'\d{4}-\d\d-\d\dT' + RFC3339_TIME, s):
        return False
    datetime.datetime.fromisoformat(s.replace('Z', '+00:00'))
    return True


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError('duplicate key')
    return dict(pairs)


def refuse_constant(name):
    raise ValueError('not JSON: ' + name)


def main():
    schema = json.load(open(sys.argv[1]))
    cls = jsonschema.validators.validator_for(schema)
    formats = jsonschema.FormatChecker()
    formats.checks('date-time', raises=ValueError)(date_time)
    formats.checks('time', raises=ValueError)(full_time)
    validator = cls(schema, format_checker=formats)
    docs = sys.stdin.buffer.read().split(b'\0')
    if docs and docs[-1] == b'':
        docs.pop()
    for i, raw in enumerate(docs):
        try:
            doc = json.loads(raw.decode('utf-8'), object_pairs_hook=no_duplicates,
                             parse_constant=refuse_constant)
            validator.validate(doc)
        except Exception as e:  # any failure is reported with the document
            print('document %d is not valid: %s\n%s' % (i, str(e).splitlines()[0], raw.decode('utf-8', 'replace')))
            return 1
    print('%d documents valid' % len(docs))
    return 0


sys.exit(main())
