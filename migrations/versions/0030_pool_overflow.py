"""pool overflow: a pool may hold more approved adapters than its nodes keep resident
(overflow on_demand), the cold ones loaded at their first request through vLLM's resolver,
within a cold tier of cold_tier_bytes of disk on each node; traffic windows count the requests
that found their adapter cold and their times to first token

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-06 09:00:00
"""

import sqlalchemy as sa
from alembic import op


revision = '0030'
down_revision = '0029'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('pools') as batch:
        batch.add_column(sa.Column('overflow', sa.String(length=16), nullable=False, server_default='refuse'))
        batch.add_column(sa.Column('cold_tier_bytes', sa.BigInteger(), nullable=True))
    with op.batch_alter_table('traffic_windows') as batch:
        # None on windows stored before: their seals did not cover these (traffic_windows/seals.py).
        batch.add_column(sa.Column('cold_requests', sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column('cold_ttft_buckets', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('traffic_windows') as batch:
        batch.drop_column('cold_ttft_buckets')
        batch.drop_column('cold_requests')
    with op.batch_alter_table('pools') as batch:
        batch.drop_column('cold_tier_bytes')
        batch.drop_column('overflow')
