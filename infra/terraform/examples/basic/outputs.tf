output "table_name" {
  value = module.s3ddb_table.table_name
}

output "table_arn" {
  value = module.s3ddb_table.table_arn
}

output "iam_policy_arn" {
  value = module.s3ddb_table.iam_policy_arn
}

output "iam_policy_json" {
  value = module.s3ddb_table.iam_policy_json
}

output "dataset_uri_example" {
  description = "A dataset URI using this table."
  value       = "s3+ddb://${var.bucket}/${var.prefix}/my-dataset?ddbTableName=${module.s3ddb_table.table_name}"
}

output "read_only_iam_policy_json" {
  description = "The policy for principals that only read the datasets."
  value       = module.s3ddb_table.read_only_iam_policy_json
}

output "glue_database" {
  description = "The AWS Glue database: s3ddb catalog register URI --glue <glue_database>.<table>."
  value       = module.s3ddb_table.glue_database
}
