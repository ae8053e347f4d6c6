"""customers known by Meta's business-scoped user ids and usernames; marketing preferences; the cost
category Meta charged

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 19:00:00.000000

Since April 2026 a customer may be known by a user id alone (API.md section 13): contacts and messages
may have no phone number. Every existing contact keeps its number, every message its number: nothing is
rewritten or dropped, columns only become optional and new ones start empty.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import wagate.core.tables

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # SQLite alters a column by copying its table; the migration's connection has foreign keys off,
    # so the copy does not cascade into conversations and messages.
    with op.batch_alter_table("contacts") as batch:
        batch.alter_column("phone_number", existing_type=sa.String(32), nullable=True)
        batch.add_column(sa.Column("username", sa.String(100), nullable=True))
    with op.batch_alter_table("messages") as batch:
        batch.alter_column("phone_number", existing_type=sa.String(32), nullable=True)
        batch.add_column(sa.Column("user_id", sa.String(64), nullable=True))
        batch.add_column(sa.Column("cost_category", sa.String(40), nullable=True))
    op.create_table(
        "customer_ids",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.String(64), nullable=False),
        sa.Column("parent_user_id", sa.String(64), nullable=True),
        sa.Column("contact_id", sa.Integer(), nullable=False),
        sa.Column("created_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"],
            ["accounts.id"],
            name=op.f("fk_customer_ids_account_id_accounts"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["contact_id"],
            ["contacts.id"],
            name=op.f("fk_customer_ids_contact_id_contacts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_customer_ids")),
        sa.UniqueConstraint("account_id", "user_id", name=op.f("uq_customer_ids_account_id")),
    )
    op.create_index(op.f("ix_customer_ids_contact_id"), "customer_ids", ["contact_id"])
    op.create_table(
        "marketing_preferences",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("channel_id", sa.Integer(), nullable=False),
        sa.Column("contact_id", sa.Integer(), nullable=False),
        sa.Column("stopped", sa.Boolean(), nullable=False),
        sa.Column("changed_at", wagate.core.tables.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["channel_id"],
            ["channels.id"],
            name=op.f("fk_marketing_preferences_channel_id_channels"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["contact_id"],
            ["contacts.id"],
            name=op.f("fk_marketing_preferences_contact_id_contacts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_marketing_preferences")),
        sa.UniqueConstraint("channel_id", "contact_id", name=op.f("uq_marketing_preferences_channel_id")),
    )
    op.create_index(op.f("ix_marketing_preferences_contact_id"), "marketing_preferences", ["contact_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_marketing_preferences_contact_id"), table_name="marketing_preferences")
    op.drop_table("marketing_preferences")
    op.drop_index(op.f("ix_customer_ids_contact_id"), table_name="customer_ids")
    op.drop_table("customer_ids")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("cost_category")
        batch.drop_column("user_id")
    with op.batch_alter_table("contacts") as batch:
        batch.drop_column("username")
    # Phone numbers stay optional: customers known only by a user id cannot be given one back.
