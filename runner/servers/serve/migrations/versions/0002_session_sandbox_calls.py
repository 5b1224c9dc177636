"""sessions: the sandbox a session asked for (one for its life, or one per call) and the count
of its calls (call ids unique across restarts)

Revision ID: 0002
Revises: 0001
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as b:
        # NULL: a session made before this column, which keeps what its policy says
        b.add_column(sa.Column("sandbox", sa.String(16), nullable=True))
        b.add_column(sa.Column("calls", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as b:
        b.drop_column("calls")
        b.drop_column("sandbox")
