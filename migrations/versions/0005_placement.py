"""placement: each pool's placement of adapters on nodes, and routers' traffic reports

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 17:00:00
"""

from alembic import op
import sqlalchemy as sa


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('pools') as batch_op:
        batch_op.add_column(sa.Column('placement', sa.JSON(), nullable=True))
    op.create_table(
        'router_traffic',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('pool_id', sa.Integer(), nullable=False),
        sa.Column('router_id', sa.String(length=64), nullable=False),
        sa.Column('rates', sa.JSON(), nullable=False),
        sa.Column('reported_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['pool_id'], ['pools.id'], ),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('pool_id', 'router_id'),
    )
    with op.batch_alter_table('router_traffic') as batch_op:
        batch_op.create_index(batch_op.f('ix_router_traffic_pool_id'), ['pool_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('router_traffic') as batch_op:
        batch_op.drop_index(batch_op.f('ix_router_traffic_pool_id'))
    op.drop_table('router_traffic')
    with op.batch_alter_table('pools') as batch_op:
        batch_op.drop_column('placement')
