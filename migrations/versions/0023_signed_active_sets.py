"""each pool keeps its active set signed with the attestation key: what it serves is read from
the signed set, never from alias rows alone (`loraplane db upgrade` signs existing pools' rows);
a canary's analysis policy and state carry a keyed seal

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-05 19:00:00
"""

import sqlalchemy as sa
from alembic import op


revision = '0023'
down_revision = '0022'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('pools', sa.Column('signed_active_set', sa.JSON(), nullable=True))
    op.add_column('promotions', sa.Column('analysis_seal', sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column('promotions', 'analysis_seal')
    op.drop_column('pools', 'signed_active_set')
