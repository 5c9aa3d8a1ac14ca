-- The send procedure counts with a plain insert. It used to take one of
-- the topic's count stripes (SELECT … FOR UPDATE SKIP LOCKED, then an
-- UPDATE, or an upsert of a new stripe when all were held): two or three
-- statements and a row lock, two thirds of the procedure's cost, held to
-- the application's commit. Now each call inserts a row of its own into
-- {{p}}topic_count: a stripe number no other row has (UUID_SHORT(),
-- which grows, so the row lands after the topic's others and an insert
-- takes no gap lock even at REPEATABLE READ), counts of 1, ver 1. Readers
-- already sum every row of a topic, so nothing else reads differently.
-- The servers fold such rows (stripe >= 64) back into the numbered
-- stripes 0-63, each batch in one transaction that locks them with SKIP
-- LOCKED (an application's uncommitted row is left alone), adds their
-- sums to a stripe and deletes them: the total, ver included, never
-- moves. Servers of schema 6 sum these rows too and may add to one;
-- either way the fold counts what it deletes.
--
-- stripe becomes BIGINT for the unique numbers. Replaced with CREATE OR
-- REPLACE, which keeps grants.
ALTER TABLE {{p}}topic_count MODIFY stripe BIGINT NOT NULL
--;
CREATE OR REPLACE PROCEDURE {{p}}count_send(IN p_topic VARBINARY(255), IN p_state TINYINT)
MODIFIES SQL DATA
BEGIN
  DECLARE v_deleted TINYINT DEFAULT NULL;
  DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
  -- 2^62 - 1: UUID_SHORT()'s top bits hold the server id, which may be
  -- up to 255; the rest (start time, counter) keeps the numbers unique.
  INSERT INTO {{p}}topic_count (topic, stripe, scheduled, ready, ver)
    VALUES (p_topic, UUID_SHORT() & 4611686018427387903, p_state = 1, p_state = 2, 1)
    ON DUPLICATE KEY UPDATE scheduled = scheduled + VALUES(scheduled), ready = ready + VALUES(ready), ver = ver + 1;
  SELECT deleted INTO v_deleted FROM {{p}}topic WHERE name = p_topic;
  IF v_deleted IS NULL THEN
    INSERT IGNORE INTO {{p}}topic (name) VALUES (p_topic);
  ELSEIF v_deleted = 1 THEN
    UPDATE {{p}}topic SET deleted = 0 WHERE name = p_topic AND deleted = 1;
  END IF;
END
