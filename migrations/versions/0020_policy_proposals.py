"""a policy that weakens an adapter's evaluation waits for a second person; each promotion keeps
the policy it went active under, so that the next one shows what changed since

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05 16:00:00
"""

import sqlalchemy as sa
from alembic import op


revision = '0020'
down_revision = '0019'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('adapters') as batch_op:
        batch_op.add_column(sa.Column('proposed_evaluation_policy', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('policy_proposed_by', sa.String(length=300), nullable=True))
        batch_op.add_column(sa.Column('policy_proposed_by_identity_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('policy_proposed_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.create_foreign_key('fk_adapters_policy_proposer_identity', 'identities',
                                    ['policy_proposed_by_identity_id'], ['id'])
    op.add_column('promotions', sa.Column('evaluation_policy', sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column('promotions', 'evaluation_policy')
    with op.batch_alter_table('adapters') as batch_op:
        batch_op.drop_constraint('fk_adapters_policy_proposer_identity', type_='foreignkey')
        batch_op.drop_column('policy_proposed_at')
        batch_op.drop_column('policy_proposed_by_identity_id')
        batch_op.drop_column('policy_proposed_by')
        batch_op.drop_column('proposed_evaluation_policy')
