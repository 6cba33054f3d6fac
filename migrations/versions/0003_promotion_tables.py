"""promotion tables: promotions, aliases, retirements, node statuses, webhooks; the pool
generation; node tokens scoped to a pool; the audit hash chain with append-only triggers

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 15:44:40.091250
"""

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from alembic import op
import sqlalchemy as sa


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('webhooks',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('url', sa.String(length=2000), nullable=False),
    sa.Column('tenant_id', sa.Integer(), nullable=True),
    sa.Column('events', sa.JSON(), nullable=False),
    sa.Column('secret', sa.String(length=100), nullable=False),
    sa.Column('created_by', sa.String(length=300), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.Column('disabled_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('webhooks', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_webhooks_tenant_id'), ['tenant_id'], unique=False)

    op.create_table('node_statuses',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('pool_id', sa.Integer(), nullable=False),
    sa.Column('node_id', sa.String(length=64), nullable=False),
    sa.Column('generation', sa.BigInteger(), nullable=False),
    sa.Column('loaded', sa.JSON(), nullable=False),
    sa.Column('failures', sa.JSON(), nullable=False),
    sa.Column('vllm_url', sa.String(length=500), nullable=False),
    sa.Column('limits', sa.JSON(), nullable=False),
    sa.Column('reported_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('first_seen_at', sa.DateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'),
              nullable=False),
    sa.ForeignKeyConstraint(['pool_id'], ['pools.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('pool_id', 'node_id')
    )
    with op.batch_alter_table('node_statuses', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_node_statuses_pool_id'), ['pool_id'], unique=False)

    op.create_table('webhook_deliveries',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('webhook_id', sa.Integer(), nullable=False),
    sa.Column('event', sa.String(length=64), nullable=False),
    sa.Column('payload', sa.JSON(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), server_default='0', nullable=False),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('last_status', sa.Integer(), nullable=True),
    sa.Column('next_attempt_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.Column('delivered_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['webhook_id'], ['webhooks.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('webhook_deliveries', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_webhook_deliveries_state'), ['state'], unique=False)
        batch_op.create_index(batch_op.f('ix_webhook_deliveries_webhook_id'), ['webhook_id'], unique=False)

    op.create_table('pool_retirements',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('pool_id', sa.Integer(), nullable=False),
    sa.Column('version_id', sa.Integer(), nullable=False),
    sa.Column('generation', sa.BigInteger(), nullable=False),
    sa.Column('retired_at', sa.DateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.ForeignKeyConstraint(['pool_id'], ['pools.id'], ),
    sa.ForeignKeyConstraint(['version_id'], ['adapter_versions.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('pool_id', 'version_id')
    )
    with op.batch_alter_table('pool_retirements', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_pool_retirements_pool_id'), ['pool_id'], unique=False)

    op.create_table('promotions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('pool_id', sa.Integer(), nullable=False),
    sa.Column('adapter_id', sa.Integer(), nullable=False),
    sa.Column('version_id', sa.Integer(), nullable=False),
    sa.Column('alias', sa.String(length=32), nullable=False),
    sa.Column('weight', sa.Integer(), nullable=True),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('state', sa.String(length=24), nullable=False),
    sa.Column('gates', sa.JSON(), nullable=False),
    sa.Column('previous_id', sa.Integer(), nullable=True),
    sa.Column('requested_by', sa.String(length=300), nullable=False),
    sa.Column('requested_by_subject', sa.String(length=128), nullable=False),
    sa.Column('comment', sa.Text(), nullable=True),
    sa.Column('decided_by', sa.String(length=300), nullable=True),
    sa.Column('decision_comment', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.Column('decided_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('activated_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['adapter_id'], ['adapters.id'], ),
    sa.ForeignKeyConstraint(['pool_id'], ['pools.id'], ),
    sa.ForeignKeyConstraint(['previous_id'], ['promotions.id'], ),
    sa.ForeignKeyConstraint(['version_id'], ['adapter_versions.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('promotions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_promotions_adapter_id'), ['adapter_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_promotions_pool_id'), ['pool_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_promotions_state'), ['state'], unique=False)
        batch_op.create_index(batch_op.f('ix_promotions_version_id'), ['version_id'], unique=False)
        batch_op.create_index('uq_promotions_open_alias', ['pool_id', 'adapter_id', 'alias'], unique=True,
                              postgresql_where=sa.text("state = 'awaiting_approval'"),
                              sqlite_where=sa.text("state = 'awaiting_approval'"))

    op.create_table('pool_aliases',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('pool_id', sa.Integer(), nullable=False),
    sa.Column('adapter_id', sa.Integer(), nullable=False),
    sa.Column('alias', sa.String(length=32), nullable=False),
    sa.Column('version_id', sa.Integer(), nullable=False),
    sa.Column('weight', sa.Integer(), nullable=True),
    sa.Column('promotion_id', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['adapter_id'], ['adapters.id'], ),
    sa.ForeignKeyConstraint(['pool_id'], ['pools.id'], ),
    sa.ForeignKeyConstraint(['promotion_id'], ['promotions.id'], ),
    sa.ForeignKeyConstraint(['version_id'], ['adapter_versions.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('pool_id', 'adapter_id', 'alias')
    )
    with op.batch_alter_table('pool_aliases', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_pool_aliases_pool_id'), ['pool_id'], unique=False)

    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.add_column(sa.Column('pool_id', sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f('ix_api_tokens_pool_id'), ['pool_id'], unique=False)
        batch_op.create_foreign_key('fk_api_tokens_pool_id', 'pools', ['pool_id'], ['id'])

    with op.batch_alter_table('audit_events', schema=None) as batch_op:
        batch_op.add_column(sa.Column('prev_hash', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('hash', sa.String(length=64), nullable=True))
        batch_op.create_index(batch_op.f('ix_audit_events_action'), ['action'], unique=False)
    _chain_existing_events()
    with op.batch_alter_table('audit_events', schema=None) as batch_op:
        batch_op.alter_column('prev_hash', existing_type=sa.String(length=64), nullable=False)
        batch_op.alter_column('hash', existing_type=sa.String(length=64), nullable=False)
    _forbid_audit_changes()

    with op.batch_alter_table('pools', schema=None) as batch_op:
        batch_op.add_column(sa.Column('generation', sa.BigInteger(), server_default='0', nullable=False))



# A frozen copy of the `sha256` scheme of registry/audit/chain.py as it stood when this revision
# was written. A migration must build the same rows whatever the live code later becomes, so it
# imports none of it; the scheme is a stored contract, and tests/registry/test_migrations.py checks
# that this copy still gives the live chain's values.
GENESIS = "0" * 64


def _canonical_time(moment: datetime) -> str:
    aware = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return aware.isoformat(timespec="microseconds")


def event_hash(prev_hash: str, *, at: datetime, actor: str, action: str, subject: str,
               tenant_id: int | None, before: Any, after: Any) -> str:
    content = json.dumps(
        {"at": _canonical_time(at), "actor": actor, "action": action, "subject": subject,
         "tenant_id": tenant_id, "before": before, "after": after},
        sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(f"{prev_hash}\n{content}".encode()).hexdigest()


def _chain_existing_events() -> None:
    events = sa.table('audit_events', sa.column('id', sa.Integer), sa.column('at', sa.DateTime(timezone=True)),
                      sa.column('actor', sa.String), sa.column('action', sa.String),
                      sa.column('subject', sa.String), sa.column('tenant_id', sa.Integer),
                      sa.column('before', sa.JSON), sa.column('after', sa.JSON),
                      sa.column('prev_hash', sa.String), sa.column('hash', sa.String))
    connection = op.get_bind()
    prev_hash = GENESIS
    for row in connection.execute(sa.select(events).order_by(events.c.id)).mappings().all():
        digest = event_hash(prev_hash, at=row['at'], actor=row['actor'], action=row['action'],
                            subject=row['subject'], tenant_id=row['tenant_id'],
                            before=row['before'], after=row['after'])
        connection.execute(events.update().where(events.c.id == row['id'])
                           .values(prev_hash=prev_hash, hash=digest))
        prev_hash = digest


# The application only ever inserts audit events; these make an UPDATE or DELETE fail loudly.
# Someone who can drop a trigger can still edit rows, which is what the hash chain catches.
APPEND_ONLY = "audit events are append-only"


def _forbid_audit_changes() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        op.execute(f'''CREATE FUNCTION audit_events_append_only() RETURNS trigger AS $$
            BEGIN RAISE EXCEPTION '{APPEND_ONLY}'; END; $$ LANGUAGE plpgsql''')
        op.execute('''CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON audit_events
            FOR EACH ROW EXECUTE FUNCTION audit_events_append_only()''')
    else:
        for verb in ('UPDATE', 'DELETE'):
            op.execute(f'''CREATE TRIGGER audit_events_no_{verb.lower()} BEFORE {verb} ON audit_events
                BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY}'); END''')


def _allow_audit_changes() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        op.execute('DROP TRIGGER audit_events_append_only ON audit_events')
        op.execute('DROP FUNCTION audit_events_append_only()')
    else:
        for verb in ('update', 'delete'):
            op.execute(f'DROP TRIGGER audit_events_no_{verb}')


def downgrade() -> None:
    _allow_audit_changes()
    with op.batch_alter_table('pools', schema=None) as batch_op:
        batch_op.drop_column('generation')

    with op.batch_alter_table('audit_events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_audit_events_action'))
        batch_op.drop_column('hash')
        batch_op.drop_column('prev_hash')

    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.drop_constraint('fk_api_tokens_pool_id', type_='foreignkey')
        batch_op.drop_index(batch_op.f('ix_api_tokens_pool_id'))
        batch_op.drop_column('pool_id')

    with op.batch_alter_table('pool_aliases', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_pool_aliases_pool_id'))

    op.drop_table('pool_aliases')
    with op.batch_alter_table('promotions', schema=None) as batch_op:
        batch_op.drop_index('uq_promotions_open_alias',
                            postgresql_where=sa.text("state = 'awaiting_approval'"),
                            sqlite_where=sa.text("state = 'awaiting_approval'"))
        batch_op.drop_index(batch_op.f('ix_promotions_version_id'))
        batch_op.drop_index(batch_op.f('ix_promotions_state'))
        batch_op.drop_index(batch_op.f('ix_promotions_pool_id'))
        batch_op.drop_index(batch_op.f('ix_promotions_adapter_id'))

    op.drop_table('promotions')
    with op.batch_alter_table('pool_retirements', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_pool_retirements_pool_id'))

    op.drop_table('pool_retirements')
    with op.batch_alter_table('webhook_deliveries', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_webhook_deliveries_webhook_id'))
        batch_op.drop_index(batch_op.f('ix_webhook_deliveries_state'))

    op.drop_table('webhook_deliveries')
    with op.batch_alter_table('node_statuses', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_node_statuses_pool_id'))

    op.drop_table('node_statuses')
    with op.batch_alter_table('webhooks', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_webhooks_tenant_id'))

    op.drop_table('webhooks')
