-- TopicDelete (DELETE /v1/topics/{topic}): a deleted topic keeps its row,
-- since its counts (acked tombstones) are kept there, with deleted = 1
-- and its settings gone. Reads hide it while it holds no scheduled, ready,
-- inflight or dead message; a send through the server or a settings put
-- clears the mark, and a send through {{p}}send or {{p}}send_priority
-- (which leave it) makes the topic shown by its counts, after which the
-- server's next topic listing clears the mark. Servers of the previous
-- version run on this schema unchanged (they show deleted topics again).
DROP PROCEDURE IF EXISTS {{p}}migrate_topic_deleted
--;
CREATE PROCEDURE {{p}}migrate_topic_deleted()
MODIFIES SQL DATA
BEGIN
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                  WHERE table_schema = DATABASE() AND table_name = '{{p}}topic' AND column_name = 'deleted') THEN
    ALTER TABLE {{p}}topic ADD COLUMN deleted TINYINT NOT NULL DEFAULT 0;
  END IF;
END
--;
CALL {{p}}migrate_topic_deleted()
--;
DROP PROCEDURE {{p}}migrate_topic_deleted
