"""traffic windows carry a seal made as the registry stores them: a window written into the
database directly (without the registry's key) is not counted for a canary

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05 18:00:00
"""

import sqlalchemy as sa
from alembic import op


revision = '0022'
down_revision = '0021'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('traffic_windows', sa.Column('seal', sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column('traffic_windows', 'seal')
