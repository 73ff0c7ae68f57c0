"""Generated protobuf code. Do not edit: run scripts/gen_protos.py."""
