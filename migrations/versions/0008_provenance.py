"""provenance: signed attestations per pool and version, tenants' upload signing keys, the
upload signature a version came with, and what nodes report about tampering and their engine

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04 01:40:00
"""

from alembic import op
import sqlalchemy as sa


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'attestations',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('pool_id', sa.Integer(), nullable=False),
        sa.Column('version_id', sa.Integer(), nullable=False),
        sa.Column('promotion_id', sa.Integer(), nullable=True),
        sa.Column('action', sa.String(length=24), nullable=False),
        sa.Column('key_id', sa.String(length=64), nullable=False),
        sa.Column('statement_sha256', sa.String(length=64), nullable=False),
        sa.Column('envelope', sa.JSON(), nullable=False),
        sa.Column('audit_event_hash', sa.String(length=64), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'),
                  nullable=False),
        sa.ForeignKeyConstraint(['pool_id'], ['pools.id'], ),
        sa.ForeignKeyConstraint(['version_id'], ['adapter_versions.id'], ),
        sa.ForeignKeyConstraint(['promotion_id'], ['promotions.id'], ),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_attestations_pool_version', 'attestations', ['pool_id', 'version_id'])
    op.create_index(op.f('ix_attestations_version_id'), 'attestations', ['version_id'])
    op.create_table(
        'tenant_signing_keys',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('tenant_id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('public_key_pem', sa.Text(), nullable=False),
        sa.Column('fingerprint', sa.String(length=64), nullable=False),
        sa.Column('created_by', sa.String(length=300), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'),
                  nullable=False),
        sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('tenant_id', 'name'),
    )
    op.create_index(op.f('ix_tenant_signing_keys_tenant_id'), 'tenant_signing_keys', ['tenant_id'])
    with op.batch_alter_table('tenants') as batch_op:
        batch_op.add_column(sa.Column('require_signed_uploads', sa.Boolean(), nullable=False,
                                      server_default=sa.false()))
    with op.batch_alter_table('adapter_versions') as batch_op:
        batch_op.add_column(sa.Column('upload_signature', sa.JSON(), nullable=True))
    with op.batch_alter_table('node_statuses') as batch_op:
        batch_op.add_column(sa.Column('incidents', sa.JSON(), nullable=False, server_default='[]'))
        batch_op.add_column(sa.Column('engine', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('node_statuses') as batch_op:
        batch_op.drop_column('engine')
        batch_op.drop_column('incidents')
    with op.batch_alter_table('adapter_versions') as batch_op:
        batch_op.drop_column('upload_signature')
    with op.batch_alter_table('tenants') as batch_op:
        batch_op.drop_column('require_signed_uploads')
    op.drop_index(op.f('ix_tenant_signing_keys_tenant_id'), table_name='tenant_signing_keys')
    op.drop_table('tenant_signing_keys')
    op.drop_index(op.f('ix_attestations_version_id'), table_name='attestations')
    op.drop_index('ix_attestations_pool_version', table_name='attestations')
    op.drop_table('attestations')
