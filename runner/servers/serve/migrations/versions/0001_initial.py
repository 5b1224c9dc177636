"""tenants, sessions and per-minute usage

Revision ID: 0001
Revises:
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("policies", sa.Text, nullable=False),
        sa.Column("images", sa.Text, nullable=False),
        sa.Column("max_sessions", sa.Integer, nullable=False),
        sa.Column("calls_per_minute", sa.Integer, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
    )
    op.create_index("ix_tenants_key_id", "tenants", ["key_id"], unique=True)
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name", ondelete="CASCADE"), nullable=False),
        sa.Column("policy", sa.String(200), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(200), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("last_used", sa.Float, nullable=False),
        sa.Column("closed_at", sa.Float, nullable=True),
    )
    op.create_index("ix_sessions_tenant", "sessions", ["tenant"])
    op.create_index("ix_sessions_state", "sessions", ["state"])
    op.create_table(
        "usage",
        sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name", ondelete="CASCADE"), primary_key=True),
        sa.Column("window", sa.Integer, primary_key=True),
        sa.Column("count", sa.Integer, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("usage")
    op.drop_table("sessions")
    op.drop_table("tenants")
