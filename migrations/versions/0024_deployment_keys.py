"""the fingerprints of the keys the registry seals and signs with, published at its start: every
worker and housekeeper compares its own with them before it starts

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-05 22:50:00
"""

import sqlalchemy as sa
from alembic import op


revision = '0024'
down_revision = '0023'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'deployment_keys',
        sa.Column('name', sa.String(length=32), primary_key=True),
        sa.Column('fingerprint', sa.String(length=128), nullable=False),
        sa.Column('published_at', sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table('deployment_keys')
