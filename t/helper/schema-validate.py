#!/usr/bin/env python3
"""schema-validate.py SCHEMA.json:DOCS[:KEYWORD,...] ... - check documents against JSON schemas
with the jsonschema package (the reference for t2200-json-schema.bats), one Python for all.

DOCS is a file of JSON texts each followed by a NUL byte (what `capy-test-tool schema-walk`
writes). KEYWORDs are removed from the schema, wherever they are, before validating: the
assertions relaxed mode ignores.
Each must parse as strict JSON (no NaN or Infinity, no duplicate keys) and validate, with the
formats the compiler enforces asserted: date, email, ipv4 and uuid by jsonschema's checker,
date-time and time here with datetime (jsonschema checks them only with a package this machine
may lack, rfc3339-validator). Prints
"N documents valid" and exits 0, or prints the first failure (schema, document, error) and
exits 1.
"""
import datetime
import json
import re
import sys

import jsonschema

# the formats the compiler holds a string to; others are annotations (JSON Schema's default)
ENFORCED = ('date', 'email', 'ipv4', 'uuid')
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


def without(s, drop):
    if isinstance(s, dict):
        return {k: without(v, drop) for k, v in s.items() if k not in drop}
    if isinstance(s, list):
        return [without(x, drop) for x in s]
    return s


def check(schema_path, docs_path, drop):
    schema = without(json.load(open(schema_path)), drop)
    cls = jsonschema.validators.validator_for(schema)
    formats = jsonschema.FormatChecker(formats=ENFORCED)
    formats.checks('date-time', raises=ValueError)(date_time)
    formats.checks('time', raises=ValueError)(full_time)
    validator = cls(schema, format_checker=formats)
    docs = open(docs_path, 'rb').read().split(b'\0')
    if docs and docs[-1] == b'':
        docs.pop()
    for i, raw in enumerate(docs):
        try:
            doc = json.loads(raw.decode('utf-8'), object_pairs_hook=no_duplicates,
                             parse_constant=refuse_constant)
            validator.validate(doc)
        except Exception as e:  # any failure is reported with the document
            print('%s: document %d is not valid: %s\n%s' % (schema_path, i, str(e).splitlines()[0],
                                                           raw.decode('utf-8', 'replace')))
            return -1
    return len(docs)


def main():
    total = 0
    for arg in sys.argv[1:]:
        parts = arg.split(':')
        n = check(parts[0], parts[1], set(parts[2].split(',')) if len(parts) > 2 else set())
        if n < 0:
            return 1
        total += n
    print('%d documents valid' % total)
    return 0


sys.exit(main())
