"""how many routers must each reach a canary's verdict before it acts: one router token no longer
steps, promotes or rolls back a canary on its own

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05 15:00:00
"""

from alembic import op
import sqlalchemy as sa


revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('pools') as batch_op:
        batch_op.add_column(sa.Column('canary_min_routers', sa.Integer(), nullable=False, server_default='2'))


def downgrade() -> None:
    with op.batch_alter_table('pools') as batch_op:
        batch_op.drop_column('canary_min_routers')
