"""audit hardening: each event names its hash scheme (the keyed chain starts here), and the
database refuses TRUNCATE on the audit log too, even in replication mode

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 22:00:00
"""

from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Every event so far was hashed with plain sha256. ADD COLUMN with a default fills the old
    # rows without an UPDATE, which the append-only triggers would refuse.
    op.add_column('audit_events', sa.Column('hash_scheme', sa.String(length=16),
                                            server_default='sha256', nullable=False))
    if op.get_bind().dialect.name == 'postgresql':
        # 0003's row triggers refuse UPDATE and DELETE; TRUNCATE fires only statement triggers.
        op.execute('''CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
            FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only()''')
        # ALWAYS: they fire under session_replication_role = replica too. Only the table's owner
        # can still disable them, which is why the registry should not run as that owner.
        for trigger in ('audit_events_append_only', 'audit_events_no_truncate'):
            op.execute(f'ALTER TABLE audit_events ENABLE ALWAYS TRIGGER {trigger}')
    # SQLite has no TRUNCATE: its DELETE without WHERE fires 0003's delete trigger.


def downgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        op.execute('DROP TRIGGER audit_events_no_truncate ON audit_events')
        op.execute('ALTER TABLE audit_events ENABLE TRIGGER audit_events_append_only')
        op.drop_column('audit_events', 'hash_scheme')
    else:
        # Not batch mode: rebuilding the table would drop 0003's triggers with it.
        op.execute('ALTER TABLE audit_events DROP COLUMN hash_scheme')
