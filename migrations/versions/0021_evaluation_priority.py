"""evaluations carry a priority: re-qualification's are claimed before others, so that versions
already serving are checked first when one tenant fills the queue

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-05 17:00:00
"""

import sqlalchemy as sa
from alembic import op


revision = '0021'
down_revision = '0020'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('evaluations', sa.Column('priority', sa.SmallInteger(), server_default='1', nullable=False))
    op.create_index('ix_evaluations_waiting', 'evaluations', ['state', 'priority', 'id'])


def downgrade() -> None:
    op.drop_index('ix_evaluations_waiting', table_name='evaluations')
    op.drop_column('evaluations', 'priority')
