"""evaluation tables

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 12:54:25.158430
"""

from alembic import op
import sqlalchemy as sa


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('eval_suites',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('base_model_id', sa.Integer(), nullable=False),
    sa.Column('dataset_sha256', sa.String(length=64), nullable=False),
    sa.Column('example_count', sa.Integer(), nullable=False),
    sa.Column('metrics', sa.JSON(), nullable=False),
    sa.Column('generation', sa.JSON(), nullable=False),
    sa.Column('created_by', sa.String(length=300), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.ForeignKeyConstraint(['base_model_id'], ['base_models.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    with op.batch_alter_table('eval_suites', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_eval_suites_base_model_id'), ['base_model_id'], unique=False)

    op.create_table('evaluations',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('version_id', sa.Integer(), nullable=False),
    sa.Column('suite_id', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('failing_metrics', sa.JSON(), nullable=False),
    sa.Column('metrics', sa.JSON(), nullable=True),
    sa.Column('engine', sa.JSON(), nullable=True),
    sa.Column('timings', sa.JSON(), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('claim_token', sa.String(length=36), nullable=True),
    sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('requested_by', sa.String(length=300), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['suite_id'], ['eval_suites.id'], ),
    sa.ForeignKeyConstraint(['version_id'], ['adapter_versions.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('evaluations', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_evaluations_state'), ['state'], unique=False)
        batch_op.create_index(batch_op.f('ix_evaluations_suite_id'), ['suite_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_evaluations_version_id'), ['version_id'], unique=False)

    op.create_table('evaluation_examples',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('evaluation_id', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('prompt', sa.Text(), nullable=False),
    sa.Column('reference', sa.Text(), nullable=False),
    sa.Column('output', sa.Text(), nullable=False),
    sa.Column('base_output', sa.Text(), nullable=False),
    sa.Column('exact_match', sa.Boolean(), nullable=False),
    sa.Column('contains', sa.Boolean(), nullable=False),
    sa.Column('reference_loglik', sa.Float(), nullable=True),
    sa.Column('base_reference_loglik', sa.Float(), nullable=True),
    sa.Column('parity_max_logprob_diff', sa.Float(), nullable=True),
    sa.Column('parity_tokens_match', sa.Boolean(), nullable=True),
    sa.ForeignKeyConstraint(['evaluation_id'], ['evaluations.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('evaluation_id', 'position')
    )


def downgrade() -> None:
    op.drop_table('evaluation_examples')
    with op.batch_alter_table('evaluations', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_evaluations_version_id'))
        batch_op.drop_index(batch_op.f('ix_evaluations_suite_id'))
        batch_op.drop_index(batch_op.f('ix_evaluations_state'))

    op.drop_table('evaluations')
    with op.batch_alter_table('eval_suites', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_eval_suites_base_model_id'))

    op.drop_table('eval_suites')
