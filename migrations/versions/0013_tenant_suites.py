"""tenant suites: an eval suite may belong to a tenant (named tenant/name), its dataset private to it

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04 21:30:00
"""

from alembic import op
import sqlalchemy as sa


revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('eval_suites') as batch_op:
        batch_op.alter_column('name', existing_type=sa.String(length=64), type_=sa.String(length=129),
                              existing_nullable=False)
        batch_op.add_column(sa.Column('tenant_id', sa.Integer(), nullable=True))
        batch_op.create_foreign_key('fk_eval_suites_tenant', 'tenants', ['tenant_id'], ['id'])
        batch_op.create_index('ix_eval_suites_tenant_id', ['tenant_id'])


def downgrade() -> None:
    with op.batch_alter_table('eval_suites') as batch_op:
        batch_op.drop_index('ix_eval_suites_tenant_id')
        batch_op.drop_constraint('fk_eval_suites_tenant', type_='foreignkey')
        batch_op.drop_column('tenant_id')
        batch_op.alter_column('name', existing_type=sa.String(length=129), type_=sa.String(length=64),
                              existing_nullable=False)
