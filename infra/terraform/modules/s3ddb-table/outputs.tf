output "table_name" {
  description = "Name of the table: use s3+ddb://bucket/prefix?ddbTableName=<table_name>."
  value       = aws_dynamodb_table.this.name
}

output "table_arn" {
  description = "ARN of the table."
  value       = aws_dynamodb_table.this.arn
}

output "hash_key" {
  description = "The table's partition key (base_uri, type S)."
  value       = aws_dynamodb_table.this.hash_key
}

output "range_key" {
  description = "The table's sort key (version, type N)."
  value       = aws_dynamodb_table.this.range_key
}

output "iam_policy_arn" {
  description = "ARN of the IAM policy s3ddb needs (null when create_iam_policy = false)."
  value       = one(aws_iam_policy.s3ddb[*].arn)
}

output "iam_policy_json" {
  description = "The IAM policy document s3ddb needs, as JSON (to embed in your own policies)."
  value       = data.aws_iam_policy_document.s3ddb.json
}

output "read_only_iam_policy_arn" {
  description = "ARN of the read-only IAM policy (null when create_iam_policy = false)."
  value       = one(aws_iam_policy.s3ddb_read_only[*].arn)
}

output "read_only_iam_policy_json" {
  description = "The read-only IAM policy document, as JSON: reading datasets, never committing."
  value       = data.aws_iam_policy_document.s3ddb_read_only.json
}

output "glue_database" {
  description = "The AWS Glue database of the datasets' tables (null: glue_database not set)."
  value       = one(aws_glue_catalog_database.this[*].name)
}
