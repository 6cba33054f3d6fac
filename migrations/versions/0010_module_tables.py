"""module tables: every base's LoRA-targetable modules, derived from its architecture once per
config; the base's hand-derived projection sizes go, since the table holds the real ones

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04 17:00:00
"""

from alembic import op
import sqlalchemy as sa


revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None

PROJECTION_SIZES = ('intermediate_size', 'num_attention_heads', 'num_key_value_heads', 'head_dim')


def upgrade() -> None:
    # Empty at first: a base registered before this revision has its table derived, and
    # stored here, the first time an upload or a sizing needs it.
    op.create_table(
        'module_tables',
        sa.Column('config_sha256', sa.String(length=64), nullable=False),
        sa.Column('architecture', sa.String(length=200), nullable=False),
        sa.Column('transformers', sa.String(length=40), nullable=False),
        sa.Column('table', sa.JSON(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'),
                  nullable=False),
        sa.PrimaryKeyConstraint('config_sha256'),
    )
    with op.batch_alter_table('base_models') as batch_op:
        for column in PROJECTION_SIZES:
            batch_op.drop_column(column)


def downgrade() -> None:
    # The sizes come back as 0: the revision before this one reads them only for Llama-shaped
    # bases, whose configs hold them; re-register a base to have them filled in.
    with op.batch_alter_table('base_models') as batch_op:
        for column in PROJECTION_SIZES:
            batch_op.add_column(sa.Column(column, sa.Integer(), nullable=False, server_default='0'))
    op.drop_table('module_tables')
