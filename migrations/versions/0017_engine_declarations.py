"""engines an operator declared for a pool: one node's report of a new engine no longer starts a
re-qualification round on its own

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05 14:00:00
"""

from alembic import op
import sqlalchemy as sa


revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('pools') as batch_op:
        batch_op.add_column(sa.Column('declared_engines', sa.JSON(), nullable=False, server_default='[]'))


def downgrade() -> None:
    with op.batch_alter_table('pools') as batch_op:
        batch_op.drop_column('declared_engines')
