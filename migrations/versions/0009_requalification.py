"""requalification: a pool's policy for versions whose engine or base config changed, the engines
and config digest its versions are qualified on, and the marks on versions that must qualify again

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04 09:00:00
"""

from alembic import op
import sqlalchemy as sa


revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

OPEN = sa.text("cleared_at IS NULL")


def upgrade() -> None:
    with op.batch_alter_table('pools') as batch_op:
        batch_op.add_column(sa.Column('requalify_policy', sa.String(length=16), nullable=False,
                                      server_default='keep_serving'))
        # Empty: the first engine a node reports becomes the qualified one.
        batch_op.add_column(sa.Column('qualified_engines', sa.JSON(), nullable=False,
                                      server_default='[]'))
        # Null: the base's config at the first report after the upgrade is the qualified one.
        batch_op.add_column(sa.Column('qualified_config_sha256', sa.String(length=64), nullable=True))
    op.create_table(
        'requalifications',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('pool_id', sa.Integer(), nullable=False),
        sa.Column('version_id', sa.Integer(), nullable=False),
        sa.Column('cause', sa.String(length=16), nullable=False),
        sa.Column('target_sha256', sa.String(length=64), nullable=False),
        sa.Column('before', sa.JSON(), nullable=True),
        sa.Column('after', sa.JSON(), nullable=False),
        sa.Column('evaluation_ids', sa.JSON(), nullable=False),
        sa.Column('marked_by', sa.String(length=300), nullable=False),
        sa.Column('marked_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('cleared_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('outcome', sa.String(length=16), nullable=True),
        sa.Column('cleared_with', sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(['pool_id'], ['pools.id'], ),
        sa.ForeignKeyConstraint(['version_id'], ['adapter_versions.id'], ),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index(op.f('ix_requalifications_pool_id'), 'requalifications', ['pool_id'])
    op.create_index(op.f('ix_requalifications_version_id'), 'requalifications', ['version_id'])
    # Racing registry processes mark a version for one cause once: the second insert fails here.
    op.create_index('uq_requalifications_open', 'requalifications',
                    ['pool_id', 'version_id', 'cause', 'target_sha256'], unique=True,
                    postgresql_where=OPEN, sqlite_where=OPEN)


def downgrade() -> None:
    op.drop_index('uq_requalifications_open', table_name='requalifications',
                  postgresql_where=OPEN, sqlite_where=OPEN)
    op.drop_index(op.f('ix_requalifications_version_id'), table_name='requalifications')
    op.drop_index(op.f('ix_requalifications_pool_id'), table_name='requalifications')
    op.drop_table('requalifications')
    with op.batch_alter_table('pools') as batch_op:
        batch_op.drop_column('qualified_config_sha256')
        batch_op.drop_column('qualified_engines')
        batch_op.drop_column('requalify_policy')
