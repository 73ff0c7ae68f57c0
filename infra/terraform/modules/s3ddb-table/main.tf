# The DynamoDB table of the s3ddb external manifest store.
#
# The key schema is a contract with the s3ddb library (docs/terraform.md): hash key
# base_uri (S), range key version (N). The other attributes of each row (path, size,
# committer, committed_at, ...) are schemaless and are not declared here: DynamoDB only
# takes attribute definitions for key attributes.
#
# s3ddb's `s3ddb create-table` and `s3ddb.external_store.create_table()` create the same
# table as this module with its default variables; tests/stores/test_terraform.py checks it.

locals {
  tags        = merge({ "s3ddb:role" = "external-manifest-store" }, var.tags)
  provisioned = var.billing_mode == "PROVISIONED"
}

resource "aws_dynamodb_table" "this" {
  name         = var.table_name
  billing_mode = var.billing_mode
  hash_key     = "base_uri"
  range_key    = "version"

  # Capacity only exists for provisioned tables; the provider rejects it otherwise.
  read_capacity  = local.provisioned ? var.read_capacity : null
  write_capacity = local.provisioned ? var.write_capacity : null

  attribute {
    name = "base_uri"
    type = "S"
  }

  attribute {
    name = "version"
    type = "N"
  }

  point_in_time_recovery {
    enabled = var.point_in_time_recovery
  }

  deletion_protection_enabled = var.deletion_protection

  dynamic "server_side_encryption" {
    for_each = var.kms_key_arn == null ? [] : [var.kms_key_arn]
    content {
      enabled     = true
      kms_key_arn = server_side_encryption.value
    }
  }

  tags = local.tags

  lifecycle {
    precondition {
      condition     = !local.provisioned || (coalesce(var.read_capacity, 0) >= 1 && coalesce(var.write_capacity, 0) >= 1)
      error_message = "billing_mode = PROVISIONED needs read_capacity and write_capacity >= 1."
    }
    precondition {
      condition     = local.provisioned || (var.read_capacity == null && var.write_capacity == null)
      error_message = "read_capacity and write_capacity only apply to billing_mode = PROVISIONED."
    }
  }
}
