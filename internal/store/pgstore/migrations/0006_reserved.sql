-- Placeholder for version 6 (the send path's op_insert, on another
-- branch): migrations are numbered without gaps. Replaced by that file.
SELECT 1;
