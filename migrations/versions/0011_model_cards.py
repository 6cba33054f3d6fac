"""model cards: the README.md uploaded beside an adapter, kept with its version

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 18:00:00
"""

from alembic import op
import sqlalchemy as sa


revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('adapter_versions') as batch_op:
        batch_op.add_column(sa.Column('model_card', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('adapter_versions') as batch_op:
        batch_op.drop_column('model_card')
