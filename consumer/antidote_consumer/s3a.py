"""S3A's credential providers when `spec.spark.conf` does not choose them: Hadoop's default
list with the AWS SDK's web identity provider added, so that a pod's projected
ServiceAccount token (IRSA: AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE, set by EKS's pod
identity webhook) works as it does for every other AWS SDK client, in the SDK's own order.

Hadoop 3.5's default (core-default.xml) stops at the instance's role: a pod on EKS would
authenticate as its node, or not at all, unless every consumer spelled out this list. The
list is tried in order, a provider without its inputs (no such variables) is skipped: keys
in the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, from `spec.env`'s Secret
references) still come first, and `fs.s3a.access.key` in the Spark conf before them (it
would sit in the settings ConfigMap in clear: docs/storage.md says not to).
"""

from __future__ import annotations

from collections.abc import Mapping

PROVIDERS_CONF = "spark.hadoop.fs.s3a.aws.credentials.provider"
PROVIDERS = (
    "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider",
    "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider",
    "software.amazon.awssdk.auth.credentials.WebIdentityTokenFileCredentialsProvider",
    "org.apache.hadoop.fs.s3a.auth.IAMInstanceCredentialsProvider",
)


def credential_providers(user_conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """The providers' Spark setting, unless the user's Spark conf sets it."""
    if PROVIDERS_CONF in (user_conf or {}):
        return {}
    return {PROVIDERS_CONF: ",".join(PROVIDERS)}
