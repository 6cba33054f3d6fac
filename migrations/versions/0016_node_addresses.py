"""node addresses bound by the operator, sealed; a node's report no longer says where it is

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05 13:00:00
"""

from alembic import op
import sqlalchemy as sa


revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'node_addresses',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('pool_id', sa.Integer(), nullable=False),
        sa.Column('node_id', sa.String(length=64), nullable=False),
        sa.Column('vllm_url', sa.String(length=500), nullable=False),
        sa.Column('seal', sa.String(length=64), nullable=False),
        sa.Column('bound_by', sa.String(length=300), nullable=False),
        sa.Column('bound_at', sa.DateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'),
                  nullable=False),
        sa.ForeignKeyConstraint(['pool_id'], ['pools.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('pool_id', 'node_id'),
    )
    op.create_index("ix_node_addresses_pool_id", 'node_addresses', ['pool_id'])
    # Addresses that nodes reported are not carried over: they were the nodes' own word. Each
    # node gets traffic again once an admin binds its address (a node token with --vllm-url).
    with op.batch_alter_table('node_statuses') as batch_op:
        batch_op.drop_column('vllm_url')


def downgrade() -> None:
    with op.batch_alter_table('node_statuses') as batch_op:
        batch_op.add_column(sa.Column('vllm_url', sa.String(length=500), nullable=False, server_default=''))
    op.drop_index("ix_node_addresses_pool_id", table_name='node_addresses')
    op.drop_table('node_addresses')
