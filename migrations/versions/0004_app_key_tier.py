"""app keys: the SLO tier an app key's requests run at

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02 20:20:00
"""

from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('api_tokens') as batch_op:
        batch_op.add_column(sa.Column('tier', sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('api_tokens') as batch_op:
        batch_op.drop_column('tier')
