"""Safe persistence: zip archives of JSON and safetensors, never pickle."""

from herl.io.archive import ArchiveError, read_archive, write_archive
from herl.io.spaces import space_from_json, space_to_json

__all__ = ["ArchiveError", "read_archive", "space_from_json", "space_to_json", "write_archive"]
