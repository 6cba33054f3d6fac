"""tenants become first-class: a display name that can change while the slug stays, a switch that
turns all of a tenant's tokens off, and the tenant's own quotas (null: the deployment default)

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-06 12:00:00
"""

import sqlalchemy as sa
from alembic import op


revision = '0026'
down_revision = '0025'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('tenants') as batch_op:
        batch_op.add_column(sa.Column('display_name', sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column('disabled_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('max_waiting_evaluations', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('max_suites', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('tenants') as batch_op:
        batch_op.drop_column('max_suites')
        batch_op.drop_column('max_waiting_evaluations')
        batch_op.drop_column('disabled_at')
        batch_op.drop_column('display_name')
