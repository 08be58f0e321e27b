"""Runs keep every kind of media spend, not only images: seconds transcribed, characters spoken, one
`media_cost_usd` for their dollars (what `image_cost_usd` held moves there) and `media_unpriced`, the
requests whose price was not known (an image counted with no dollars under 0015 is one of them).

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"


def upgrade() -> None:
    with op.batch_alter_table("runs") as t:
        t.add_column(sa.Column("transcribed_seconds", sa.Float, nullable=False, server_default="0"))
        t.add_column(sa.Column("spoken_characters", sa.Integer, nullable=False, server_default="0"))
        t.add_column(sa.Column("media_cost_usd", sa.Float, nullable=False, server_default="0"))
        t.add_column(sa.Column("media_unpriced", sa.Integer, nullable=False, server_default="0"))
    op.execute("UPDATE runs SET media_cost_usd = image_cost_usd,"
               " media_unpriced = CASE WHEN images > 0 AND image_cost_usd = 0 THEN images ELSE 0 END")
    with op.batch_alter_table("runs") as t:
        t.drop_column("image_cost_usd")


def downgrade() -> None:
    # 0015 knew images only: the dollars go back to image_cost_usd (audio's with them: kept, not lost).
    with op.batch_alter_table("runs") as t:
        t.add_column(sa.Column("image_cost_usd", sa.Float, nullable=False, server_default="0"))
    op.execute("UPDATE runs SET image_cost_usd = media_cost_usd")
    with op.batch_alter_table("runs") as t:
        t.drop_column("media_unpriced")
        t.drop_column("media_cost_usd")
        t.drop_column("spoken_characters")
        t.drop_column("transcribed_seconds")
