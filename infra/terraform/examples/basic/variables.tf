variable "region" {
  description = "AWS region of the table."
  type        = string
  default     = "us-east-1"
}

variable "table_name" {
  description = "Name of the DynamoDB table."
  type        = string
  default     = "s3ddb-commits"
}

variable "bucket" {
  description = "S3 bucket holding the datasets (it is not created here)."
  type        = string
  default     = "my-datasets"
}

variable "prefix" {
  description = "Key prefix of the datasets in the bucket (\"\" = whole bucket)."
  type        = string
  default     = "warehouse"
}

variable "deletion_protection" {
  description = "Keep on in production; set false to be able to terraform destroy."
  type        = bool
  default     = true
}

variable "glue_database" {
  description = "AWS Glue database for the datasets' tables, kept current by s3ddb (docs/catalogs.md); null: none."
  type        = string
  default     = null
}
