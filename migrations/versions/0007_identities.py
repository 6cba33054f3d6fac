"""identities: a stable identity and an issuing lineage for every token, node and router tokens
bound to their id, token expiry, and dashboard sessions that signing out ends

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 22:00:00
"""

import re
from datetime import UTC, datetime, timedelta

from alembic import op
import sqlalchemy as sa


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

# Tokens made before expiry existed get the default lifetime from the day of the upgrade.
BACKFILLED_TOKEN_TTL = timedelta(days=90)
LABEL_TOKEN_ID = re.compile(r"token (\d+)\)$")  # the tail of Principal.label


def upgrade() -> None:
    op.create_table(
        'identities',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=128), nullable=False),
        sa.Column('tenant_id', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'),
                  nullable=False),
        sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index(op.f('ix_identities_tenant_id'), 'identities', ['tenant_id'], unique=False)
    with op.batch_alter_table('api_tokens') as batch_op:
        batch_op.add_column(sa.Column('identity_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('created_by_token_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('instance_id', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True))
    _backfill_identities()
    with op.batch_alter_table('api_tokens') as batch_op:
        batch_op.alter_column('identity_id', existing_type=sa.Integer(), nullable=False)
        batch_op.create_foreign_key('fk_api_tokens_identity_id_identities', 'identities',
                                    ['identity_id'], ['id'])
        batch_op.create_foreign_key('fk_api_tokens_created_by', 'api_tokens',
                                    ['created_by_token_id'], ['id'])
        batch_op.create_index(batch_op.f('ix_api_tokens_identity_id'), ['identity_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_api_tokens_created_by_token_id'), ['created_by_token_id'],
                              unique=False)
    with op.batch_alter_table('adapter_versions') as batch_op:
        batch_op.add_column(sa.Column('uploaded_by_identity_id', sa.Integer(), nullable=True))
        batch_op.create_foreign_key('fk_adapter_versions_uploader_identity', 'identities',
                                    ['uploaded_by_identity_id'], ['id'])
    with op.batch_alter_table('promotions') as batch_op:
        batch_op.add_column(sa.Column('requested_by_identity_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('decided_by_identity_id', sa.Integer(), nullable=True))
        batch_op.create_foreign_key('fk_promotions_requester_identity', 'identities',
                                    ['requested_by_identity_id'], ['id'])
        batch_op.create_foreign_key('fk_promotions_decider_identity', 'identities',
                                    ['decided_by_identity_id'], ['id'])
    _backfill_parties()
    op.create_table(
        'dashboard_sessions',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('secret_hash', sa.String(length=64), nullable=False),
        sa.Column('token_id', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'),
                  nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['token_id'], ['api_tokens.id'], ),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('secret_hash'),
    )
    op.create_index(op.f('ix_dashboard_sessions_token_id'), 'dashboard_sessions', ['token_id'],
                    unique=False)


def _backfill_identities() -> None:
    """Each existing token becomes its own identity: nothing recorded says two tokens were one
    person, so none is assumed."""
    bind = op.get_bind()
    tokens = bind.execute(sa.text("SELECT id, subject, tenant_id FROM api_tokens")).all()
    expires = datetime.now(UTC) + BACKFILLED_TOKEN_TTL
    for token_id, subject, tenant_id in tokens:
        identity_id = bind.execute(
            sa.text("INSERT INTO identities (name, tenant_id) VALUES (:name, :tenant) RETURNING id"),
            {"name": subject, "tenant": tenant_id}).scalar_one()
        bind.execute(sa.text("UPDATE api_tokens SET identity_id = :identity, expires_at = :expires "
                             "WHERE id = :id"),
                     {"identity": identity_id, "expires": expires, "id": token_id})


def _backfill_parties() -> None:
    bind = op.get_bind()
    bind.execute(sa.text(
        "UPDATE adapter_versions SET uploaded_by_identity_id = (SELECT identity_id FROM api_tokens "
        "WHERE api_tokens.id = adapter_versions.uploaded_by_token_id)"))
    for promotion_id, label in bind.execute(sa.text("SELECT id, requested_by FROM promotions")).all():
        match = LABEL_TOKEN_ID.search(label or "")
        if match:
            bind.execute(sa.text(
                "UPDATE promotions SET requested_by_identity_id = (SELECT identity_id FROM api_tokens "
                "WHERE id = :token) WHERE id = :id"), {"token": int(match.group(1)), "id": promotion_id})


def downgrade() -> None:
    op.drop_index(op.f('ix_dashboard_sessions_token_id'), table_name='dashboard_sessions')
    op.drop_table('dashboard_sessions')
    with op.batch_alter_table('promotions') as batch_op:
        batch_op.drop_constraint('fk_promotions_decider_identity', type_='foreignkey')
        batch_op.drop_constraint('fk_promotions_requester_identity', type_='foreignkey')
        batch_op.drop_column('decided_by_identity_id')
        batch_op.drop_column('requested_by_identity_id')
    with op.batch_alter_table('adapter_versions') as batch_op:
        batch_op.drop_constraint('fk_adapter_versions_uploader_identity', type_='foreignkey')
        batch_op.drop_column('uploaded_by_identity_id')
    with op.batch_alter_table('api_tokens') as batch_op:
        batch_op.drop_index(batch_op.f('ix_api_tokens_created_by_token_id'))
        batch_op.drop_index(batch_op.f('ix_api_tokens_identity_id'))
        batch_op.drop_constraint('fk_api_tokens_created_by', type_='foreignkey')
        batch_op.drop_constraint('fk_api_tokens_identity_id_identities', type_='foreignkey')
        batch_op.drop_column('expires_at')
        batch_op.drop_column('instance_id')
        batch_op.drop_column('created_by_token_id')
        batch_op.drop_column('identity_id')
    op.drop_index(op.f('ix_identities_tenant_id'), table_name='identities')
    op.drop_table('identities')
