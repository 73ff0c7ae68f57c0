variable "table_name" {
  description = "Name of the DynamoDB table; datasets use it as s3+ddb://bucket/prefix?ddbTableName=<table_name>."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9_.-]{3,255}$", var.table_name))
    error_message = "table_name must be 3-255 characters of a-z, A-Z, 0-9, '_', '-' and '.'."
  }
}

variable "billing_mode" {
  description = "PAY_PER_REQUEST (on demand, the default) or PROVISIONED."
  type        = string
  default     = "PAY_PER_REQUEST"

  validation {
    condition     = contains(["PAY_PER_REQUEST", "PROVISIONED"], var.billing_mode)
    error_message = "billing_mode must be PAY_PER_REQUEST or PROVISIONED."
  }
}

variable "read_capacity" {
  description = "Read capacity units; only with billing_mode = PROVISIONED (required then)."
  type        = number
  default     = null
}

variable "write_capacity" {
  description = "Write capacity units; only with billing_mode = PROVISIONED (required then). Each commit costs about 2 writes (claim + finalize)."
  type        = number
  default     = null
}

variable "point_in_time_recovery" {
  description = "Enable point-in-time recovery: the table decides which manifest is each version, so it is worth being able to restore."
  type        = bool
  default     = true
}

variable "deletion_protection" {
  description = "Refuse DeleteTable (and terraform destroy) until this is set to false and applied."
  type        = bool
  default     = true
}

variable "kms_key_arn" {
  description = "Customer-managed KMS key to encrypt the table with; null uses the AWS-owned key."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags for the table and the IAM policy, merged over { \"s3ddb:role\" = \"external-manifest-store\" }."
  type        = map(string)
  default     = {}
}

# --- IAM ------------------------------------------------------------------------------

variable "create_iam_policy" {
  description = "Create an aws_iam_policy with exactly the permissions s3ddb needs. The policy document is output either way."
  type        = bool
  default     = true
}

variable "iam_policy_name" {
  description = "Name of the IAM policy; default \"<table_name>-s3ddb\"."
  type        = string
  default     = null
}

variable "iam_policy_path" {
  description = "Path of the IAM policy."
  type        = string
  default     = "/"
}

variable "s3_locations" {
  description = <<-EOT
    S3 locations holding s3ddb datasets, for the IAM policy. Each is a bucket and a key
    prefix (no leading slash; "" = the whole bucket). Objects under the prefix get
    GetObject/PutObject/DeleteObject/AbortMultipartUpload; ListBucket is limited to the
    prefix. Empty list: the policy covers DynamoDB only.
  EOT
  type = list(object({
    bucket = string
    prefix = optional(string, "")
  }))
  default = []

  validation {
    condition     = alltrue([for l in var.s3_locations : !startswith(l.prefix, "/")])
    error_message = "s3_locations prefixes must not start with '/'."
  }
}

# --- AWS Glue -------------------------------------------------------------------------

variable "glue_database" {
  description = "Create this AWS Glue database for the datasets' tables (s3ddb catalog register URI --glue <glue_database>.<table>) and grant GetTable/UpdateTable/CreateTable on its tables only (readers: GetTable). null: no Glue."
  type        = string
  default     = null

  validation {
    condition     = var.glue_database == null || can(regex("^[a-z0-9_]{1,255}$", var.glue_database))
    error_message = "glue_database must be 1-255 characters of a-z, 0-9 and '_'."
  }
}
