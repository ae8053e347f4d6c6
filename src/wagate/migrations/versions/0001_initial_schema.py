"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-21 07:50:51.712278
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import wagate.core.tables

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "accounts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("created_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_accounts")),
        sa.UniqueConstraint("name", name=op.f("uq_accounts_name")),
    )
    op.create_table(
        "outbox",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column(
            "kind",
            sa.Enum(
                "send_message",
                "meta_webhook",
                "sync_templates",
                "purge_expired",
                name="jobkind",
                native_enum=False,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column(
            "state",
            sa.Enum("ready", "unconfirmed", name="jobstate", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("priority", sa.SmallInteger(), nullable=False),
        sa.Column("channel_id", sa.Integer(), nullable=True),
        sa.Column("message_id", sa.String(length=40), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("run_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.String(length=1000), nullable=True),
        sa.Column("locked_by", sa.String(length=64), nullable=True),
        sa.Column("locked_until", wagate.core.tables.UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
    )
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.create_index("ix_outbox_due", ["channel_id", "state", "priority", "run_at"], unique=False)
        batch_op.create_index("ix_outbox_kind_due", ["kind", "run_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_outbox_message_id"), ["message_id"], unique=False)

    op.create_table(
        "parked_statuses",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("upstream_message_id", sa.String(length=128), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("received_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_parked_statuses")),
    )
    with op.batch_alter_table("parked_statuses", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_parked_statuses_upstream_message_id"), ["upstream_message_id"], unique=False
        )

    op.create_table(
        "channels",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("provider", sa.String(length=40), nullable=False),
        sa.Column("phone_number", sa.String(length=32), nullable=False),
        sa.Column("phone_number_id", sa.String(length=64), nullable=False),
        sa.Column("waba_id", sa.String(length=64), nullable=False),
        sa.Column("access_token_encrypted", sa.String(length=2000), nullable=False),
        sa.Column("messages_per_second", sa.Integer(), nullable=False),
        sa.Column("templates_synced_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=True),
        sa.Column("created_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_channels_account_id_accounts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_channels")),
        sa.UniqueConstraint("phone_number_id", name=op.f("uq_channels_phone_number_id")),
    )
    with op.batch_alter_table("channels", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_channels_account_id"), ["account_id"], unique=False)

    op.create_table(
        "contacts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("phone_number", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("created_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_contacts_account_id_accounts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_contacts")),
        sa.UniqueConstraint("account_id", "phone_number", name=op.f("uq_contacts_account_id")),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column(
            "role",
            sa.Enum("administrator", "agent", name="role", native_enum=False, length=20),
            nullable=False,
        ),
        sa.Column("password_hash", sa.String(length=200), nullable=False),
        sa.Column("created_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_users_account_id_accounts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("email", name=op.f("uq_users_email")),
    )
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_users_account_id"), ["account_id"], unique=False)

    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("token_prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_api_keys_account_id_accounts"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_api_keys_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_keys_token_hash")),
        sa.UniqueConstraint("user_id", "name", name=op.f("uq_api_keys_user_id")),
    )
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_keys_account_id"), ["account_id"], unique=False)

    op.create_table(
        "channel_members",
        sa.Column("channel_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["channel_id"],
            ["channels.id"],
            name=op.f("fk_channel_members_channel_id_channels"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_channel_members_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("channel_id", "user_id", name=op.f("pk_channel_members")),
    )
    op.create_table(
        "conversations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("channel_id", sa.Integer(), nullable=False),
        sa.Column("contact_id", sa.Integer(), nullable=False),
        sa.Column(
            "status",
            sa.Enum("open", "pending", "resolved", name="conversationstatus", native_enum=False, length=20),
            nullable=False,
        ),
        sa.Column("last_customer_message_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=True),
        sa.Column("last_activity_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("created_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"],
            ["accounts.id"],
            name=op.f("fk_conversations_account_id_accounts"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["channel_id"],
            ["channels.id"],
            name=op.f("fk_conversations_channel_id_channels"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["contact_id"],
            ["contacts.id"],
            name=op.f("fk_conversations_contact_id_contacts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversations")),
        sa.UniqueConstraint("channel_id", "contact_id", name=op.f("uq_conversations_channel_id")),
    )
    with op.batch_alter_table("conversations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_conversations_account_id"), ["account_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_conversations_last_activity_at"), ["last_activity_at"], unique=False
        )

    op.create_table(
        "templates",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("channel_id", sa.Integer(), nullable=False),
        sa.Column("meta_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=512), nullable=False),
        sa.Column("language", sa.String(length=20), nullable=False),
        sa.Column("category", sa.String(length=40), nullable=False),
        sa.Column("status", sa.String(length=40), nullable=False),
        sa.Column("parameter_format", sa.String(length=20), nullable=False),
        sa.Column("components", sa.JSON(), nullable=False),
        sa.Column("variables", sa.JSON(), nullable=False),
        sa.Column("synced_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["channel_id"], ["channels.id"], name=op.f("fk_templates_channel_id_channels"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_templates")),
        sa.UniqueConstraint("channel_id", "name", "language", name=op.f("uq_templates_channel_id")),
    )
    with op.batch_alter_table("templates", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_templates_channel_id"), ["channel_id"], unique=False)

    op.create_table(
        "idempotency_keys",
        sa.Column("api_key_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("response_status", sa.Integer(), nullable=False),
        sa.Column("response_body", sa.JSON(), nullable=False),
        sa.Column("created_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["api_key_id"],
            ["api_keys.id"],
            name=op.f("fk_idempotency_keys_api_key_id_api_keys"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("api_key_id", "key", name=op.f("pk_idempotency_keys")),
    )
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_idempotency_keys_expires_at"), ["expires_at"], unique=False)

    op.create_table(
        "messages",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("channel_id", sa.Integer(), nullable=False),
        sa.Column("conversation_id", sa.Integer(), nullable=False),
        sa.Column(
            "direction",
            sa.Enum("outbound", "inbound", name="direction", native_enum=False, length=10),
            nullable=False,
        ),
        sa.Column("phone_number", sa.String(length=32), nullable=False),
        sa.Column(
            "status",
            sa.Enum(
                "sent", "delivered", "read", "failed", name="messagestatus", native_enum=False, length=20
            ),
            nullable=False,
        ),
        sa.Column(
            "sent_as",
            sa.Enum("session", "template", name="sentas", native_enum=False, length=20),
            nullable=True,
        ),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("template_name", sa.String(length=512), nullable=True),
        sa.Column("template_language", sa.String(length=20), nullable=True),
        sa.Column("template_category", sa.String(length=40), nullable=True),
        sa.Column("template_parameters", sa.JSON(), nullable=True),
        sa.Column("external_error", sa.String(length=1000), nullable=True),
        sa.Column("upstream_message_id", sa.String(length=128), nullable=True),
        sa.Column("cost_micros", sa.Integer(), nullable=False),
        sa.Column("cost_currency", sa.String(length=3), nullable=False),
        sa.Column("batch_id", sa.String(length=40), nullable=True),
        sa.Column("status_callback", sa.JSON(), nullable=True),
        sa.Column("status_history", sa.JSON(), nullable=False),
        sa.Column("created_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_messages_account_id_accounts"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["channel_id"], ["channels.id"], name=op.f("fk_messages_channel_id_channels"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_messages_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_messages")),
        sa.UniqueConstraint("upstream_message_id", name=op.f("uq_messages_upstream_message_id")),
    )
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_messages_batch_id"), ["batch_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_messages_conversation_id"), ["conversation_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_messages_conversation_id"))
        batch_op.drop_index(batch_op.f("ix_messages_batch_id"))

    op.drop_table("messages")
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_idempotency_keys_expires_at"))

    op.drop_table("idempotency_keys")
    with op.batch_alter_table("templates", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_templates_channel_id"))

    op.drop_table("templates")
    with op.batch_alter_table("conversations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_conversations_last_activity_at"))
        batch_op.drop_index(batch_op.f("ix_conversations_account_id"))

    op.drop_table("conversations")
    op.drop_table("channel_members")
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_keys_account_id"))

    op.drop_table("api_keys")
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_users_account_id"))

    op.drop_table("users")
    op.drop_table("contacts")
    with op.batch_alter_table("channels", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_channels_account_id"))

    op.drop_table("channels")
    with op.batch_alter_table("parked_statuses", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_parked_statuses_upstream_message_id"))

    op.drop_table("parked_statuses")
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_outbox_message_id"))
        batch_op.drop_index("ix_outbox_kind_due")
        batch_op.drop_index("ix_outbox_due")

    op.drop_table("outbox")
    op.drop_table("accounts")
