# The AWS Glue database s3ddb keeps dataset tables current in (docs/catalogs.md), when
# var.glue_database is set. `s3ddb catalog register URI --glue <database>.<table>` names
# a table in it; every version published afterwards moves the table's Iceberg
# metadata_location: GetTable, then UpdateTable (CreateTable registers it the first
# time, or again after it was dropped). The writers' policy grants exactly that on this
# database's tables, and the readers' policy GetTable, which engines use to find them.
# Glue authorizes a table action on the catalog, the database and the table, so the
# statements name all three.

data "aws_partition" "current" {}
data "aws_region" "current" {}
data "aws_caller_identity" "current" {}

locals {
  glue_enabled = var.glue_database != null
  glue_arn     = "arn:${data.aws_partition.current.partition}:glue:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}"
  glue_resources = local.glue_enabled ? [
    "${local.glue_arn}:catalog",
    "${local.glue_arn}:database/${var.glue_database}",
    "${local.glue_arn}:table/${var.glue_database}/*",
  ] : []
}

resource "aws_glue_catalog_database" "this" {
  count = local.glue_enabled ? 1 : 0

  name        = var.glue_database
  description = "Tables of s3ddb datasets, kept at their newest version by s3ddb (docs/catalogs.md)"
}
