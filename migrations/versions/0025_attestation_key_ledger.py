"""the ledger of attestation keys from the environment: the trust bundle's version, the key that
signs, and when each key it replaced stops being trusted, sealed with the deployment's secret

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-06 00:50:00
"""

import sqlalchemy as sa
from alembic import op


revision = '0025'
down_revision = '0024'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'attestation_key_ledger',
        sa.Column('name', sa.String(length=32), primary_key=True),
        sa.Column('version', sa.Integer(), nullable=False),
        sa.Column('current_key_id', sa.String(length=128), nullable=False),
        sa.Column('trust_ends', sa.JSON(), nullable=False),
        sa.Column('seal', sa.String(length=64), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table('attestation_key_ledger')
