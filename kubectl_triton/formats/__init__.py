"""File and value formats: pbtxt, YAML, schemas, durations."""
