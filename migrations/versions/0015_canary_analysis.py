"""canary analysis: a canary promotion's policy and state, and the routers' traffic windows

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04 23:40:00
"""

from alembic import op
import sqlalchemy as sa


revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('promotions') as batch_op:
        batch_op.add_column(sa.Column('analysis', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('analysis_state', sa.JSON(), nullable=True))
    op.create_table(
        'traffic_windows',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('pool_id', sa.Integer(), nullable=False),
        sa.Column('router_id', sa.String(length=64), nullable=False),
        sa.Column('report_id', sa.String(length=36), nullable=False),
        sa.Column('served_name', sa.String(length=140), nullable=False),
        sa.Column('alias', sa.String(length=32), nullable=False),
        sa.Column('at', sa.DateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
        sa.Column('requests', sa.BigInteger(), nullable=False),
        sa.Column('errors', sa.JSON(), nullable=False),
        sa.Column('completion_tokens', sa.BigInteger(), nullable=False),
        sa.Column('busy_s', sa.Float(), nullable=False),
        sa.Column('ttft_buckets', sa.JSON(), nullable=False),
        sa.Column('latency_buckets', sa.JSON(), nullable=False),
        sa.Column('shadow_compared', sa.BigInteger(), server_default='0', nullable=False),
        sa.Column('shadow_agreed', sa.BigInteger(), server_default='0', nullable=False),
        sa.ForeignKeyConstraint(['pool_id'], ['pools.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('pool_id', 'router_id', 'report_id', 'served_name', 'alias'),
    )
    op.create_index('ix_traffic_windows_pool_name_at', 'traffic_windows', ['pool_id', 'served_name', 'at'])


def downgrade() -> None:
    op.drop_index('ix_traffic_windows_pool_name_at', table_name='traffic_windows')
    op.drop_table('traffic_windows')
    with op.batch_alter_table('promotions') as batch_op:
        batch_op.drop_column('analysis_state')
        batch_op.drop_column('analysis')
