import json

from kbuild.config import json_schema

print(json.dumps(json_schema(), indent=2, sort_keys=True))
