import json

from kbuild.schema import json_schema

print(json.dumps(json_schema(), indent=2, sort_keys=True))
