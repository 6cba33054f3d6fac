"""an index on audit events by subject and action: approvals and node addresses read their
sealed evidence that way

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05 16:00:00
"""

from alembic import op


revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_audit_events_subject_action', 'audit_events', ['subject', 'action'])


def downgrade() -> None:
    op.drop_index('ix_audit_events_subject_action', table_name='audit_events')
