"""single sign-on: people known by their identity provider's issuer and subject, sign-ins in
progress (each state used once), tokens marked with where they came from, and identities linked
as one person

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-06 01:10:00
"""

import sqlalchemy as sa
from alembic import op


revision = '0027'
down_revision = '0026'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'sso_identities',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('issuer', sa.String(length=500), nullable=False),
        sa.Column('subject', sa.String(length=255), nullable=False),
        sa.Column('identity_id', sa.Integer(), sa.ForeignKey('identities.id', name='fk_sso_identities_identity'),
                  nullable=False, index=True),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column('last_sign_in_at', sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint('issuer', 'subject', name='uq_sso_identities_issuer_subject'),
    )
    op.create_table(
        'sso_sign_ins',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('state_hash', sa.String(length=64), nullable=False, unique=True),
        sa.Column('purpose', sa.String(length=16), nullable=False),
        sa.Column('cli_port', sa.Integer(), nullable=True),
        sa.Column('cli_challenge', sa.String(length=128), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False, index=True),
        sa.Column('used_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('exchange_hash', sa.String(length=64), nullable=True, unique=True),
        # What the provider's answer granted, for the CLI to exchange once for a token.
        sa.Column('identity_id', sa.Integer(), sa.ForeignKey('identities.id', name='fk_sso_sign_ins_identity'),
                  nullable=True),
        sa.Column('role', sa.String(length=16), nullable=True),
        sa.Column('tenant_id', sa.Integer(), sa.ForeignKey('tenants.id', name='fk_sso_sign_ins_tenant'),
                  nullable=True),
        sa.Column('display_name', sa.String(length=128), nullable=True),
        # HMAC of the grant under a key the database never sees: a row written there grants nothing.
        sa.Column('grant_seal', sa.String(length=64), nullable=True),
        sa.Column('exchanged_at', sa.DateTime(timezone=True), nullable=True),
    )
    with op.batch_alter_table('identities') as batch:
        batch.add_column(sa.Column('same_as_id', sa.Integer(), nullable=True))
        batch.create_foreign_key('fk_identities_same_as', 'identities', ['same_as_id'], ['id'])
    with op.batch_alter_table('api_tokens') as batch:
        batch.add_column(sa.Column('origin', sa.String(length=16), server_default='issued', nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('api_tokens') as batch:
        batch.drop_column('origin')
    with op.batch_alter_table('identities') as batch:
        batch.drop_constraint('fk_identities_same_as', type_='foreignkey')
        batch.drop_column('same_as_id')
    op.drop_table('sso_sign_ins')
    op.drop_table('sso_identities')
