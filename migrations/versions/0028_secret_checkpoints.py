"""secret checkpoints: each rotated-out LORAPLANE_SECRET_KEY with the last audit event and token
made before its rotation, sealed with the secret that replaced it

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-06 01:30:00
"""

import sqlalchemy as sa
from alembic import op


revision = '0028'
down_revision = '0027'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'secret_checkpoints',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('previous', sa.String(length=32), nullable=False, unique=True),
        sa.Column('current', sa.String(length=32), nullable=False),
        sa.Column('through_event', sa.BigInteger(), nullable=False),
        sa.Column('through_token', sa.BigInteger(), nullable=False),
        sa.Column('at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('seal', sa.String(length=64), nullable=False),
    )


def downgrade() -> None:
    op.drop_table('secret_checkpoints')
