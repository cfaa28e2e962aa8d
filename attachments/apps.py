from django.apps import AppConfig


class AttachmentsConfig(AppConfig):
    name = "attachments"
    verbose_name = "Attachments (files on messages)"

    def ready(self) -> None:
        from django.conf import settings

        from attachments.html import attachments_html, composer_html
        from attachments.live import attachment_settled_announce
        from attachments.render import attachments_extras
        from attachments.signals import attachment_settled
        from attachments.web import PATH_PREFIX, upload_body_limit
        from chats.extras import (
            register_composer_html,
            register_message_extras,
            register_message_html,
        )
        from hermes_site.body_limits import body_limit_register

        register_message_extras("attachments", attachments_extras, default=list)
        register_message_html("attachments", attachments_html)
        register_composer_html("attachments", composer_html)
        attachment_settled.connect(
            attachment_settled_announce, sender=None, dispatch_uid="attachments-live"
        )
        # Multipart posts carry files: their paths may send more than the API's JSON bodies
        # and the dashboard's forms.
        body_limit_register("/api/v1/uploads/", settings.ATTACHMENTS_API_MAX_BODY_BYTES)
        body_limit_register(PATH_PREFIX, upload_body_limit())
