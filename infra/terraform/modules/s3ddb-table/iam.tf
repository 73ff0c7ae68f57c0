# The least privilege s3ddb needs, as a policy document (always output) and optionally
# an aws_iam_policy to attach to the roles/users of writers and readers.
#
# DynamoDB: DescribeTable (schema check, once per process), GetItem/Query (consistent
# reads), PutItem + ConditionCheckItem (the claim of a version: one TransactWriteItems
# that checks the predecessor row and puts the new one), UpdateItem (finalize: repoint the row
# from the staged to the final manifest), DeleteItem/BatchWriteItem (delete a dataset's
# rows).
# Glue (var.glue_database set): GetTable/UpdateTable/CreateTable on that database's
# tables (glue.tf).
# S3: GetObject/PutObject/DeleteObject on the datasets' objects (CopyObject of a staged
# manifest needs GetObject on the source and PutObject on the target), ListBucket for
# listings, and AbortMultipartUpload so that s3fs can clean up failed large uploads.

locals {
  # ARN of every object under each location; "" prefix = the whole bucket.
  s3_object_arns = [
    for l in var.s3_locations :
    l.prefix == "" ? "arn:aws:s3:::${l.bucket}/*" : "arn:aws:s3:::${l.bucket}/${trimsuffix(l.prefix, "/")}/*"
  ]
  # ListBucket is a bucket-level action: one statement per bucket, limited to the
  # location's prefixes with the s3:prefix condition (none when a location is the whole
  # bucket).
  s3_buckets = distinct([for l in var.s3_locations : l.bucket])
  s3_list = [
    for i, b in local.s3_buckets : {
      index    = i
      bucket   = b
      prefixes = [for l in var.s3_locations : trimsuffix(l.prefix, "/") if l.bucket == b]
    }
  ]
}

# Listing, limited to the datasets' prefixes: the same for writers and readers.
data "aws_iam_policy_document" "s3ddb_list" {
  dynamic "statement" {
    for_each = local.s3_list
    content {
      sid       = "S3ddbList${statement.value.index}"
      actions   = ["s3:ListBucket"]
      resources = ["arn:aws:s3:::${statement.value.bucket}"]

      dynamic "condition" {
        # Omitted when one of the bucket's locations is the whole bucket.
        for_each = contains(statement.value.prefixes, "") ? [] : [statement.value.prefixes]
        content {
          test     = "StringLike"
          variable = "s3:prefix"
          values   = flatten([for p in condition.value : [p, "${p}/*"]])
        }
      }
    }
  }
}

data "aws_iam_policy_document" "s3ddb" {
  source_policy_documents = [data.aws_iam_policy_document.s3ddb_list.json]

  statement {
    sid = "S3ddbManifestStore"
    actions = [
      "dynamodb:DescribeTable",
      "dynamodb:GetItem",
      "dynamodb:PutItem",
      "dynamodb:ConditionCheckItem",
      "dynamodb:UpdateItem",
      "dynamodb:Query",
      "dynamodb:DeleteItem",
      "dynamodb:BatchWriteItem",
    ]
    resources = [aws_dynamodb_table.this.arn]
  }

  dynamic "statement" {
    for_each = length(local.s3_object_arns) > 0 ? [1] : []
    content {
      sid = "S3ddbObjects"
      actions = [
        "s3:GetObject",
        "s3:PutObject",
        "s3:DeleteObject",
        "s3:AbortMultipartUpload",
      ]
      resources = local.s3_object_arns
    }
  }

  dynamic "statement" {
    for_each = local.glue_enabled ? [1] : []
    content {
      sid       = "S3ddbGlueTables"
      actions   = ["glue:GetTable", "glue:UpdateTable", "glue:CreateTable"]
      resources = local.glue_resources
    }
  }

}

resource "aws_iam_policy" "s3ddb" {
  count = var.create_iam_policy ? 1 : 0

  name        = coalesce(var.iam_policy_name, "${var.table_name}-s3ddb")
  path        = var.iam_policy_path
  description = "s3ddb: commits through DynamoDB table ${var.table_name} and dataset objects on S3"
  policy      = data.aws_iam_policy_document.s3ddb.json
  tags        = local.tags
}

# The read-only variant, for principals that only read datasets (query engines,
# dashboards): DescribeTable, GetItem and Query on the table; GetObject and (from
# s3ddb_list) ListBucket on the datasets. Such a reader cannot finish a version a crashed writer left staged (that
# takes UpdateItem and PutObject); it reads that version from its staged manifest until
# a writer or `s3ddb sync` finalizes it.
data "aws_iam_policy_document" "s3ddb_read_only" {
  source_policy_documents = [data.aws_iam_policy_document.s3ddb_list.json]

  statement {
    sid = "S3ddbManifestStoreRead"
    actions = [
      "dynamodb:DescribeTable",
      "dynamodb:GetItem",
      "dynamodb:Query",
    ]
    resources = [aws_dynamodb_table.this.arn]
  }

  dynamic "statement" {
    for_each = length(local.s3_object_arns) > 0 ? [1] : []
    content {
      sid       = "S3ddbObjectsRead"
      actions   = ["s3:GetObject"]
      resources = local.s3_object_arns
    }
  }

  dynamic "statement" {
    for_each = local.glue_enabled ? [1] : []
    content {
      sid       = "S3ddbGlueTablesRead"
      actions   = ["glue:GetTable"]
      resources = local.glue_resources
    }
  }

}

resource "aws_iam_policy" "s3ddb_read_only" {
  count = var.create_iam_policy ? 1 : 0

  name        = "${coalesce(var.iam_policy_name, "${var.table_name}-s3ddb")}-read-only"
  path        = var.iam_policy_path
  description = "s3ddb: read-only access to datasets committed through DynamoDB table ${var.table_name}"
  policy      = data.aws_iam_policy_document.s3ddb_read_only.json
  tags        = local.tags
}
