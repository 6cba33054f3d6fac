"""served artifacts: a version's bytes derived from its upload (folded scaling) keep the upload's
digest and manifest as provenance

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04 20:00:00
"""

from alembic import op
import sqlalchemy as sa


revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('adapter_versions') as batch_op:
        batch_op.add_column(sa.Column('derived_from', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('adapter_versions') as batch_op:
        batch_op.drop_column('derived_from')
