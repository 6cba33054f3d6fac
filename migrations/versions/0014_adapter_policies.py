"""adapter evaluation policies (its own required suites, challenger margins) and paired evaluations

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 23:10:00
"""

from alembic import op
import sqlalchemy as sa


revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('adapters') as batch_op:
        batch_op.add_column(sa.Column('evaluation_policy', sa.JSON(), nullable=True))
    with op.batch_alter_table('evaluations') as batch_op:
        batch_op.add_column(sa.Column('incumbent_evaluation_id', sa.Integer(), nullable=True))
        batch_op.create_foreign_key('fk_evaluations_incumbent', 'evaluations',
                                    ['incumbent_evaluation_id'], ['id'])
        batch_op.create_index('ix_evaluations_incumbent_evaluation_id', ['incumbent_evaluation_id'])


def downgrade() -> None:
    with op.batch_alter_table('evaluations') as batch_op:
        batch_op.drop_index('ix_evaluations_incumbent_evaluation_id')
        batch_op.drop_constraint('fk_evaluations_incumbent', type_='foreignkey')
        batch_op.drop_column('incumbent_evaluation_id')
    with op.batch_alter_table('adapters') as batch_op:
        batch_op.drop_column('evaluation_policy')
