"""The open formats s3ddb publishes: one literal tuple of plug-ins.

Each entry is an :class:`~s3ddb.open_formats.model.OpenFormat`; a dataset names the
ones it publishes by their ``name`` in its config (:data:`FORMATS` order is the
order they are written in). Everything else asks the plug-ins through
:mod:`s3ddb.open_formats.publisher` (:func:`~s3ddb.open_formats.publisher.all_formats`,
:func:`~s3ddb.open_formats.publisher.writer_of`), which imports this module on first
use: a process whose datasets publish no format never loads the format modules.
"""

from __future__ import annotations

from s3ddb.open_formats.delta import DeltaWriter
from s3ddb.open_formats.iceberg import IcebergWriter
from s3ddb.open_formats.model import OpenFormat

__all__ = ["FORMATS"]

#: Every open format, in the order a version is published in them.
FORMATS: tuple[OpenFormat, ...] = (IcebergWriter(), DeltaWriter())
