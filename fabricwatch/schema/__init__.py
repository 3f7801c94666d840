"""Telemetry schema ``fabricwatch.telemetry/v1`` (DESIGN §3): column specs, bus encoding, validation.

One message is one scrape of one source, columnar. The package has one module per job:

* :mod:`~fabricwatch.schema.spec`: the kinds, their columns (types, ranges) and topics;
* :mod:`~fabricwatch.schema.message`: the :class:`Message` struct, its header check, :class:`SchemaError`;
* :mod:`~fabricwatch.schema.encoding`: bus bytes (MessagePack, packed numeric columns, batch records);
* :mod:`~fabricwatch.schema.validate`: messages of one kind → one Arrow table, bad messages set aside.

Every public name is importable from here (``from fabricwatch.schema import X``, ``schema.X``).
"""

from fabricwatch.schema.encoding import (
    BATCH_SCHEMA,
    INT_NULL,
    MessageBatch,
    check_batch_header,
    decode,
    decode_record,
    encode,
    encode_batch,
    explode,
    record_messages,
    record_rows,
    unpack,
)
from fabricwatch.schema.message import Message, SchemaError, check_header, from_dict, make, row_count, to_dict
from fabricwatch.schema.spec import (
    ALL_TOPICS,
    COUNTER_MAX,
    DBM,
    KINDS,
    LOSSLESS_PRIORITIES,
    MAX_ROWS,
    SCHEMA,
    TELEMETRY_TOPICS,
    TEMP,
    TOPIC_DEADLETTER,
    TOPIC_FINDINGS,
    TOPIC_INCIDENTS,
    TOPIC_PREFIX,
    TS_MAX,
    TS_MIN,
    Column,
    KindSpec,
    pause_columns,
    topic_of,
    tx_pause_duration_column,
)
from fabricwatch.schema.validate import Batch, table_schema, table_to_messages, to_table, types_index

__all__ = [
    "ALL_TOPICS",
    "BATCH_SCHEMA",
    "COUNTER_MAX",
    "DBM",
    "INT_NULL",
    "KINDS",
    "LOSSLESS_PRIORITIES",
    "MAX_ROWS",
    "SCHEMA",
    "TELEMETRY_TOPICS",
    "TEMP",
    "TOPIC_DEADLETTER",
    "TOPIC_FINDINGS",
    "TOPIC_INCIDENTS",
    "TOPIC_PREFIX",
    "TS_MAX",
    "TS_MIN",
    "Batch",
    "Column",
    "KindSpec",
    "Message",
    "MessageBatch",
    "SchemaError",
    "check_batch_header",
    "check_header",
    "decode",
    "decode_record",
    "encode",
    "encode_batch",
    "explode",
    "from_dict",
    "make",
    "pause_columns",
    "record_messages",
    "record_rows",
    "row_count",
    "table_schema",
    "table_to_messages",
    "to_dict",
    "to_table",
    "topic_of",
    "tx_pause_duration_column",
    "types_index",
    "unpack",
]
