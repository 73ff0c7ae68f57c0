# Provision the s3ddb commit table and the IAM policy for writers and readers of the
# datasets under s3://<bucket>/<prefix>.
#
#   terraform init && terraform apply -var bucket=my-datasets -var prefix=warehouse
#
# then write with s3+ddb://my-datasets/warehouse/<dataset>?ddbTableName=s3ddb-commits
# and attach the output policy (iam_policy_arn) to the writers' roles.

module "s3ddb_table" {
  source = "../../modules/s3ddb-table"

  table_name          = var.table_name
  deletion_protection = var.deletion_protection
  glue_database       = var.glue_database

  s3_locations = [
    { bucket = var.bucket, prefix = var.prefix },
  ]

  tags = {
    project = "s3ddb-example"
  }
}
