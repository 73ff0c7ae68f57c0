"""Catalogs that find s3ddb datasets by name, kept at the newest published version.

AWS Glue (:mod:`.glue`): a dataset names its Glue table in its configuration; every
published version moves the table's Iceberg metadata location (a Delta table is
registered once, by location). A catalog update never fails a commit: see
docs/catalogs.md.
"""

from s3ddb.catalogs.glue import (
    CATALOG_CONFIG_KEYS,
    GLUE_FORMAT_KEY,
    GLUE_FORMATS,
    GLUE_TABLE_KEY,
    GlueSync,
    GlueTarget,
    check_glue_name,
    glue_problems,
    glue_target,
    sync_glue_table,
    update_catalogs,
)

__all__ = [
    "CATALOG_CONFIG_KEYS",
    "GLUE_FORMATS",
    "GLUE_FORMAT_KEY",
    "GLUE_TABLE_KEY",
    "GlueSync",
    "GlueTarget",
    "check_glue_name",
    "glue_problems",
    "glue_target",
    "sync_glue_table",
    "update_catalogs",
]
