"""`python -m services.mail`: the mail sandbox."""

from effectively_once.process import load
from services.http_process import MailSettings, serve_http
from services.mail.app import create_app

if __name__ == "__main__":
    settings = load(MailSettings)
    app = create_app(settings.DATABASE_URL, settings.SANDBOX_ADMIN_PASSWORD)
    serve_http("mail", app, settings, *settings.listen)
